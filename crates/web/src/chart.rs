//! Charts as SVG strings, drawn with plotters: the loss curve and the variance bars.

use models::probes::Measured;
use models::variance::ClosedForm;
use plotters::prelude::*;

/// (step, loss) points as a 480×220 SVG; an empty chart before the first point.
pub fn loss_svg(points: &[(usize, f32)]) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 220)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let max_step = points.last().map_or(10, |p| p.0.max(10));
        let max_loss = points.iter().map(|p| p.1).fold(1.0f32, f32::max) * 1.05;
        let chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(36)
            .build_cartesian_2d(0..max_step, 0f32..max_loss);
        if let Ok(mut chart) = chart {
            let _ = chart
                .configure_mesh()
                .x_desc("step")
                .y_desc("loss")
                .label_style(("sans-serif", 11))
                .draw();
            let _ = chart.draw_series(LineSeries::new(points.iter().copied(), &RGBColor(31, 119, 180)));
        }
        let _ = root.present();
    }
    svg
}

/// Bars of one block's measured variance ratios, forward and backward for each of its four
/// storage and retrieval sites, on a log axis; a black tick marks the closed form of each.
pub fn variance_svg(measured: &[Measured], closed: &[ClosedForm]) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 240)).into_drawing_area();
        let _ = root.fill(&WHITE);
        // (site, measured, closed form): the forward bar, then the backward bar, of each site.
        let bars: Vec<(String, Option<f64>, Option<f64>)> = measured
            .iter()
            .flat_map(|m| {
                let c = closed.iter().find(|c| c.layer == m.site.layer && c.op == m.site.op);
                let site = format!("{} {}", name(&m.site.layer), name(&m.site.op));
                [
                    (site.clone(), m.forward_ratio, c.map(|c| c.forward_ratio)),
                    (site, m.backward_ratio, c.map(|c| c.backward_ratio)),
                ]
            })
            .collect();
        let values = bars.iter().flat_map(|b| [b.1, b.2]).flatten().filter(|v| *v > 0.0);
        let (lo, hi) = values.fold((1e-2f64, 1e1f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (lo, hi) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil()));
        let n = bars.len().max(1);
        let chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..n as f64, (lo..hi).log_scale());
        if let Ok(mut chart) = chart {
            let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
            let _ = chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x| labels.get(x.floor() as usize).cloned().unwrap_or_default())
                .y_desc("σ² ratio")
                .y_label_formatter(&|y| format!("{y:.0e}"))
                .label_style(("sans-serif", 9))
                .draw();
            for (i, (label, value, closed)) in bars.iter().enumerate() {
                let x = i as f64;
                let color = if label.ends_with("fwd") {
                    RGBColor(31, 119, 180)
                } else {
                    RGBColor(255, 127, 14)
                };
                if let Some(v) = value.filter(|v| *v > 0.0) {
                    let _ = chart.draw_series(std::iter::once(Rectangle::new(
                        [(x + 0.15, lo), (x + 0.85, v)],
                        color.filled(),
                    )));
                }
                if let Some(c) = closed.filter(|c| *c > 0.0) {
                    let _ = chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x + 0.05, c), (x + 0.95, c)],
                        BLACK.stroke_width(2),
                    )));
                }
            }
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
        let root = SVGBackend::with_string(&mut svg, (480, 200)).into_drawing_area();
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
                .label_style(("sans-serif", 10))
                .draw();
            let _ = chart.draw_series(counts.iter().enumerate().map(|(i, &c)| {
                Rectangle::new(
                    [(i as f64 + 0.1, 0.0), (i as f64 + 0.9, c as f64)],
                    RGBColor(44, 160, 44).filled(),
                )
            }));
            let even = counts.iter().sum::<u64>() as f64 / n as f64;
            let _ = chart.draw_series(std::iter::once(PathElement::new(
                vec![(0.0, even), (n as f64, even)],
                BLACK.stroke_width(1),
            )));
        }
        let _ = root.present();
    }
    svg
}
