//! Charts as SVG strings, drawn with plotters: the runs' loss curves, the variance bars and the
//! bucket histograms.

use models::probes::Measured;
use models::variance::ClosedForm;
use plotters::prelude::*;

/// One run's loss curve: its legend label, colour and (step, loss) points.
pub struct Curve {
    pub label: String,
    pub color: RGBColor,
    pub points: Vec<(usize, f32)>,
}

/// Colours of runs, in the order they were made (Tableau 10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The charts' text: plotters writes a font of size s as s/1.24 pixels, so 14 is 11.3 px, the
/// page's smallest text.
const TEXT: (&str, u32) = ("sans-serif", 14);

/// Loss curves overlaid as a 440-pixel-wide SVG, the plot 240 high and under it a legend line
/// naming each curve (under, not over the plot: a run's label is long, and the curves are where
/// an overlaid legend would sit); an empty chart before the first point.
pub fn loss_svg(curves: &[Curve]) -> String {
    lines_svg(curves, "loss", 240)
}

/// Curves of (step, value) overlaid, the value axis from 0 (to at least 1) and named `y_desc`,
/// the plot `plot` pixels high, with the legend under it.
pub fn lines_svg(curves: &[Curve], y_desc: &str, height: u32) -> String {
    const LINE: u32 = 16;
    let shown: Vec<&Curve> = curves.iter().filter(|c| !c.points.is_empty()).collect();
    let legend = if shown.is_empty() {
        0
    } else {
        6 + LINE * shown.len() as u32
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, height + legend)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let (plot, below) = root.split_vertically(height);
        let points = curves.iter().flat_map(|c| c.points.iter());
        let max_step = points.clone().map(|p| p.0).max().unwrap_or(10).max(10);
        let max_value = points.map(|p| p.1).filter(|l| l.is_finite()).fold(1.0f32, f32::max) * 1.05;
        let chart = ChartBuilder::on(&plot)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(36)
            .build_cartesian_2d(0..max_step, 0f32..max_value);
        if let Ok(mut chart) = chart {
            let _ = chart
                .configure_mesh()
                .x_desc("step")
                .y_desc(y_desc)
                .label_style(TEXT)
                .axis_desc_style(TEXT)
                .draw();
            for c in &shown {
                let _ = chart.draw_series(LineSeries::new(c.points.iter().copied(), c.color.stroke_width(2)));
            }
        }
        for (i, c) in shown.iter().enumerate() {
            let y = 4 + LINE as i32 * i as i32 + LINE as i32 / 2;
            let _ = below.draw(&PathElement::new(vec![(44, y), (60, y)], c.color.stroke_width(2)));
            let _ = below.draw(&Text::new(c.label.clone(), (66, y - 7), TEXT));
        }
        let _ = root.present();
    }
    svg
}

/// Forward bars: σ²(out)/σ²(in).
pub const FORWARD: RGBColor = RGBColor(31, 119, 180);
/// Backward bars: σ²(grad in)/σ²(grad out).
pub const BACKWARD: RGBColor = RGBColor(255, 127, 14);

/// Bars of one block's measured variance ratios on a log axis: for each of its four storage and
/// retrieval sites a blue forward bar and an orange backward bar, a black tick on each at the
/// closed form, the site named under its pair, and a legend.
pub fn variance_svg(measured: &[Measured], closed: &[ClosedForm]) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, 240)).into_drawing_area();
        let _ = root.fill(&WHITE);
        // (site, [forward, backward] measured, [forward, backward] closed form).
        type Bars = (String, [Option<f64>; 2], [Option<f64>; 2]);
        let sites: Vec<Bars> = measured
            .iter()
            .map(|m| {
                let c = closed.iter().find(|c| c.layer == m.site.layer && c.op == m.site.op);
                (
                    format!("{} {}", name(&m.site.layer), name(&m.site.op)),
                    [m.forward_ratio, m.backward_ratio],
                    [c.map(|c| c.forward_ratio), c.map(|c| c.backward_ratio)],
                )
            })
            .collect();
        let values = sites
            .iter()
            .flat_map(|b| b.1.into_iter().chain(b.2))
            .flatten()
            .filter(|v| *v > 0.0);
        let (lo, hi) = values.fold((1e-2f64, 1e1f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        // A decade of headroom above for the legend.
        let (lo, hi) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil() + 1.0));
        let n = sites.len().max(1);
        // Site i is centred on x = i, so that its label sits under its pair of bars.
        let chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, (lo..hi).log_scale());
        if let Ok(mut chart) = chart {
            let labels: Vec<String> = sites.iter().map(|b| b.0.clone()).collect();
            let _ = chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x| {
                    let i = x.round();
                    match (x - i).abs() < 1e-6 && i >= 0.0 {
                        true => labels.get(i as usize).cloned().unwrap_or_default(),
                        false => String::new(),
                    }
                })
                .y_desc("σ² ratio")
                .y_label_formatter(&|y| format!("{y:.0e}"))
                .label_style(TEXT)
                .axis_desc_style(TEXT)
                .draw();
            let bar = |i: usize, side: usize| {
                let x = i as f64 - 0.42 + side as f64 * 0.44;
                (x, x + 0.38)
            };
            for (side, color, label) in [
                (0, FORWARD, "forward σ²out/σ²in"),
                (1, BACKWARD, "backward σ²gin/σ²gout"),
            ] {
                let rects = sites.iter().enumerate().filter_map(|(i, b)| {
                    let v = b.1[side].filter(|v| *v > 0.0)?;
                    let (x0, x1) = bar(i, side);
                    Some(Rectangle::new([(x0, lo), (x1, v)], color.filled()))
                });
                if let Ok(series) = chart.draw_series(rects) {
                    series
                        .label(label)
                        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
                }
            }
            let ticks = sites.iter().enumerate().flat_map(|(i, b)| {
                (0..2).filter_map(move |side| {
                    let c = b.2[side].filter(|c| *c > 0.0)?;
                    let (x0, x1) = bar(i, side);
                    Some(PathElement::new(
                        vec![(x0 - 0.03, c), (x1 + 0.03, c)],
                        BLACK.stroke_width(2),
                    ))
                })
            });
            if let Ok(series) = chart.draw_series(ticks) {
                series
                    .label("closed form at init")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(2)));
            }
            let _ = chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .label_font(TEXT)
                .draw();
        }
        let _ = root.present();
    }
    svg
}

/// The lower-case name serde gives a unit enum variant ("attn", "storage").
fn name<T: serde::Serialize>(x: &T) -> String {
    serde_json::to_value(x)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Hits per bucket of one hash table as bars; the line is the even share.
pub fn histogram_svg(counts: &[u64]) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, 200)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let n = counts.len().max(1);
        let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
        let chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..n as f64, 0f64..top);
        if let Ok(mut chart) = chart {
            let _ = chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("bucket")
                .y_desc("hits")
                // Buckets and hits are whole numbers.
                .x_label_formatter(&|x| format!("{}", x.round() as i64))
                .y_label_formatter(&|y| format!("{}", y.round() as i64))
                .label_style(TEXT)
                .axis_desc_style(TEXT)
                .draw();
            let _ = chart.draw_series(
                counts
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.9, c as f64)], BAR.filled())),
            );
            let even = counts.iter().sum::<u64>() as f64 / n as f64;
            let _ = chart.draw_series(std::iter::once(PathElement::new(
                vec![(0.0, even), (n as f64, even)],
                BLACK.stroke_width(1),
            )));
        }
        let _ = root.present();
    }
    label_bars(&svg, BAR, counts)
}

/// The histogram's bar colour, which nothing else in it has.
const BAR: RGBColor = RGBColor(44, 160, 44);

/// `svg` with each rectangle of colour `bar`, in drawing order, marked as bucket i's bar with its
/// hits (`class="bar" data-bucket data-hits`): what a reader checks by label, not by counting
/// rectangles (the browser test reads them). Plotters draws one rectangle a bar, in order,
/// zero-height ones too.
fn label_bars(svg: &str, bar: RGBColor, counts: &[u64]) -> String {
    let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", bar.0, bar.1, bar.2);
    let mut parts = svg.split(&fill);
    let mut out = parts.next().unwrap_or_default().to_string();
    for (i, part) in parts.enumerate() {
        if let Some(c) = counts.get(i) {
            out += &format!("class=\"bar\" data-bucket=\"{i}\" data-hits=\"{c}\" ");
        }
        out += &fill;
        out += part;
    }
    out
}
