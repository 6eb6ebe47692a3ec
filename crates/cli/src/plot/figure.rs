//! A figure written as SVG or PNG with the embedded font, and what every figure draws with:
//! the chart's frame, its colours and where its legend goes.

use super::curves::{draw_curves, Curves};
use super::intervals::{draw_intervals, IntervalPlot};
use super::setting::{draw_setting, SettingPlot};
use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Pixels of a PNG, and the SVG's view.
const SIZE: (u32, u32) = (1024, 640);

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Svg,
    Png,
}

pub(super) fn format_of(out: &Path) -> Result<Format> {
    let ext = out.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => bail!(
            "--out {} must end in .png or .svg: the extension picks the format",
            out.display()
        ),
    }
}

/// Distinct colours: Tableau 10, then plotters' palette.
pub(super) fn colour(i: usize) -> RGBColor {
    const TAB10: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    match TAB10.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b),
        None => {
            let c = Palette99::pick(i - TAB10.len()).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

pub(super) enum Figure {
    Curves(Curves),
    Setting(SettingPlot),
    Intervals(IntervalPlot),
}

/// Plotters' errors as anyhow's, with what was being done.
pub(super) fn drawn<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| anyhow!("cannot draw the figure: {e}"))
}

pub(super) fn write(figure: &Figure, out: &Path, format: Format) -> Result<()> {
    // Text is measured and drawn with this font whatever the backend, so no system font is read.
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("cannot load the embedded DejaVu Sans font"))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let written = |e: String| anyhow!("cannot write {}: {e}", out.display());
    match format {
        Format::Svg => {
            let root = SVGBackend::new(out, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
        Format::Png => {
            let root = BitMapBackend::new(out, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
    }
}

impl Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        drawn(root.fill(&WHITE))?;
        match self {
            Figure::Curves(c) => draw_curves(root, c),
            Figure::Setting(s) => draw_setting(root, s),
            Figure::Intervals(p) => draw_intervals(root, p),
        }
    }
}

/// The corner of the plot that the lines (sampled along each segment) cross least, the upper
/// right on a tie: where the legend hides the least.
pub(super) fn legend_corner<'a>(
    lines: impl Iterator<Item = &'a [(f64, f64)]>,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    // (position, x range, y range) of each corner, as fractions of the plot.
    let corners = [
        (SeriesLabelPosition::UpperRight, (0.5, 1.0), (0.6, 1.0)),
        (SeriesLabelPosition::LowerLeft, (0.0, 0.5), (0.0, 0.4)),
        (SeriesLabelPosition::UpperLeft, (0.0, 0.5), (0.6, 1.0)),
        (SeriesLabelPosition::LowerRight, (0.5, 1.0), (0.0, 0.4)),
    ];
    let mut hits = [0usize; 4];
    let norm = |(x, y): (f64, f64)| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0));
    for line in lines {
        let samples = line.windows(2).flat_map(|w| {
            let (a, b) = (norm(w[0]), norm(w[1]));
            (0..=16).map(move |k| {
                let t = f64::from(k) / 16.0;
                (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t)
            })
        });
        for (x, y) in samples.chain(line.iter().map(|&p| norm(p))) {
            for (n, (_, xs, ys)) in hits.iter_mut().zip(&corners) {
                if (xs.0..=xs.1).contains(&x) && (ys.0..=ys.1).contains(&y) {
                    *n += 1;
                }
            }
        }
    }
    let best = (0..corners.len()).min_by_key(|&i| hits[i]).unwrap_or(0);
    corners
        .into_iter()
        .nth(best)
        .map_or(SeriesLabelPosition::UpperRight, |c| c.0)
}

pub(super) fn chart_builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &Option<String>,
) -> ChartBuilder<'a, 'b, DB> {
    let mut chart = ChartBuilder::on(root);
    chart.margin(20).x_label_area_size(55).y_label_area_size(80);
    if let Some(t) = title {
        chart.caption(t, ("sans-serif", 24));
    }
    chart
}
