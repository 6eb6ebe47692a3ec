//! A figure written as SVG or PNG with the embedded font, and what every figure draws with:
//! its title, the chart's frame, its colours, and the legend's panel beside the chart.

use super::curves::{draw_curves, Curves};
use super::intervals::{draw_intervals, IntervalPlot};
use super::scaling::{draw_scaling, ScalingPlot};
use super::setting::{draw_setting, SettingPlot};
use super::tuning::{draw_tuning, TuningPlot};
use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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
    Tuning(TuningPlot),
    Scaling(ScalingPlot),
}

/// The chart's mesh as every figure draws it: the axes' descriptions and their tick labels in
/// the figures' font and sizes.
pub(super) fn draw_mesh<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    (x_desc, y_desc): (&str, &str),
    x_label: &dyn Fn(&f64) -> String,
    y_label: &dyn Fn(&f64) -> String,
) -> Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    drawn(
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(x_label)
            .y_label_formatter(y_label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .draw(),
    )
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
    // Drawn beside it and renamed: a failed plot leaves an earlier figure whole.
    crate::run_dir::write_atomic(out, |tmp| match format {
        Format::Svg => {
            let root = SVGBackend::new(tmp, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
        Format::Png => {
            let root = BitMapBackend::new(tmp, SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| written(e.to_string()))
        }
    })
}

impl Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        drawn(root.fill(&WHITE))?;
        match self {
            Figure::Curves(c) => draw_curves(root, c),
            Figure::Setting(s) => draw_setting(root, s),
            Figure::Intervals(p) => draw_intervals(root, p),
            Figure::Tuning(t) => draw_tuning(root, t),
            Figure::Scaling(p) => draw_scaling(root, p),
        }
    }
}

pub(super) fn chart_builder<'a, 'b, DB: DrawingBackend>(area: &'a DrawingArea<DB, Shift>) -> ChartBuilder<'a, 'b, DB> {
    let mut chart = ChartBuilder::on(area);
    chart.margin(20).x_label_area_size(55).y_label_area_size(80);
    chart
}

/// The title's largest and smallest font sizes: below the smallest it wraps.
const TITLE_PX: (u32, u32) = (24, 16);

/// The text style of `px` pixels, anchored at `pos`.
pub(super) fn font(px: u32, pos: Pos) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", px).into_font()).pos(pos)
}

/// The width in pixels of `text` at `px`.
fn width_of<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, text: &str, px: u32) -> Result<u32> {
    drawn(area.estimate_text_size(text, &font(px, Pos::default()))).map(|(w, _)| w)
}

/// `text` broken at spaces into lines no wider than `width` pixels at `px`; a word wider than
/// that (a directory's name) is broken between characters.
pub(super) fn wrap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    px: u32,
    width: u32,
) -> Result<Vec<String>> {
    let mut lines: Vec<String> = vec![];
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if width_of(area, &format!("{line} {word}"), px)? <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => {
                let mut piece = String::new();
                for ch in word.chars() {
                    piece.push(ch);
                    if piece.chars().count() > 1 && width_of(area, &piece, px)? > width {
                        piece.pop();
                        lines.push(std::mem::take(&mut piece));
                        piece.push(ch);
                    }
                }
                lines.push(piece);
            }
        }
    }
    Ok(lines)
}

/// The largest font size from `max` down to `min` pixels at which `text` is at most `width`
/// pixels wide (`min` where none is).
pub(super) fn fitting<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    (max, min): (u32, u32),
    width: u32,
) -> Result<u32> {
    let mut px = max;
    while px > min && width_of(area, text, px)? > width {
        px -= 1;
    }
    Ok(px)
}

/// Draws the title centred across the top of `root`, at 24 pixels, smaller where that is wider
/// than the figure, and wrapped below 16, so that no title is cut; returns the area below it.
pub(super) fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &Option<String>,
) -> Result<DrawingArea<DB, Shift>> {
    let Some(title) = title.as_deref().filter(|t| !t.trim().is_empty()) else {
        return Ok(root.clone());
    };
    let (w, _) = root.dim_in_pixel();
    let room = w.saturating_sub(40);
    let px = fitting(root, title, TITLE_PX, room)?;
    let lines = wrap(root, title, px, room)?;
    let line_h = px * 5 / 4;
    for (i, line) in lines.iter().enumerate() {
        let y = 10 + (i as u32 * line_h) as i32;
        drawn(root.draw(&Text::new(
            line.as_str(),
            ((w / 2) as i32, y),
            font(px, Pos::new(HPos::Center, VPos::Top)),
        )))?;
    }
    let (_, below) = root.split_vertically(10 + lines.len() as u32 * line_h);
    Ok(below)
}

/// The legend's share of the figure's width, right of the chart: it never covers the data.
const PANEL: f64 = 0.24;

/// `area` split into the chart (left) and the legend's panel (right).
pub(super) fn with_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = area.dim_in_pixel();
    area.split_horizontally((f64::from(w) * (1.0 - PANEL)) as u32)
}

/// A mark of a legend's entry, drawn as the chart draws it.
pub(super) enum Mark {
    Line(RGBColor),
    Dashed(RGBColor),
    Dot(RGBColor),
    Cross(RGBColor),
    /// A horizontal interval of this stroke width.
    Bar(RGBColor, u32),
    Star(RGBColor),
    /// A filled square: a colour's meaning.
    Swatch(RGBColor),
}

/// One line of a legend: its marks drawn over each other, then its label.
pub(super) struct Entry {
    pub(super) marks: Vec<Mark>,
    pub(super) label: String,
}

impl Entry {
    pub(super) fn new(marks: Vec<Mark>, label: impl Into<String>) -> Self {
        Self {
            marks,
            label: label.into(),
        }
    }
}

/// A five-pointed star of radius `r` pixels around (0, 0).
pub(super) fn star(r: f64) -> Vec<(i32, i32)> {
    (0..10)
        .map(|k| {
            let radius = if k % 2 == 0 { r } else { r * 0.45 };
            let angle = std::f64::consts::PI * (f64::from(k) / 5.0 - 0.5);
            (
                (radius * angle.cos()).round() as i32,
                (radius * angle.sin()).round() as i32,
            )
        })
        .collect()
}

/// The entries down the panel from its top, each label wrapped to the panel's width; the font
/// shrinks from 15 to 11 pixels to fit them, and what still does not fit is counted at the end.
pub(super) fn draw_legend<DB: DrawingBackend>(panel: &DrawingArea<DB, Shift>, entries: &[Entry]) -> Result<()> {
    // The chart's own margin: the first entry level with the plot's top.
    const TOP: u32 = 24;
    const MARK_W: i32 = 26;
    let (w, h) = panel.dim_in_pixel();
    let (x_mark, x_text) = (6, 6 + MARK_W + 8);
    let text_w = w.saturating_sub(x_text as u32 + 8);
    let mut px = 15;
    let laid = loop {
        let line_h = px * 5 / 4;
        let wrapped = entries
            .iter()
            .map(|e| wrap(panel, &e.label, px, text_w))
            .collect::<Result<Vec<_>>>()?;
        let height: u32 = wrapped.iter().map(|l| l.len() as u32 * line_h + px / 2).sum();
        if TOP + height <= h || px <= 11 {
            break (px, line_h, wrapped);
        }
        px -= 1;
    };
    let (px, line_h, wrapped) = laid;
    let mut y = TOP as i32;
    for (i, (entry, lines)) in entries.iter().zip(&wrapped).enumerate() {
        let needed = (lines.len() as u32 * line_h) as i32;
        // Room for this entry and the line that counts the rest.
        if y + needed + line_h as i32 > h as i32 && i + 1 < entries.len() {
            drawn(panel.draw(&Text::new(
                format!("… and {} more", entries.len() - i),
                (x_text, y + line_h as i32 / 2),
                font(px, Pos::new(HPos::Left, VPos::Center)),
            )))?;
            break;
        }
        let mid = y + line_h as i32 / 2;
        for mark in &entry.marks {
            draw_mark(panel, mark, (x_mark, mid), MARK_W)?;
        }
        for (k, line) in lines.iter().enumerate() {
            drawn(panel.draw(&Text::new(
                line.as_str(),
                (x_text, mid + (k as u32 * line_h) as i32),
                font(px, Pos::new(HPos::Left, VPos::Center)),
            )))?;
        }
        y += needed + (px / 2) as i32;
    }
    Ok(())
}

/// One mark in the `width` pixels from `(x, y)` rightwards, centred on `y`.
fn draw_mark<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    mark: &Mark,
    (x, y): (i32, i32),
    width: i32,
) -> Result<()> {
    let mid = x + width / 2;
    match *mark {
        Mark::Line(c) => drawn(area.draw(&PathElement::new(vec![(x, y), (x + width, y)], c.stroke_width(2)))),
        Mark::Dashed(c) => drawn(area.draw(&DashedPathElement::new(
            vec![(x, y), (x + width, y)],
            6,
            4,
            c.stroke_width(2),
        ))),
        Mark::Dot(c) => drawn(area.draw(&Circle::new((mid, y), 4, c.filled()))),
        Mark::Cross(c) => drawn(area.draw(&Cross::new((mid, y), 4, c.stroke_width(1)))),
        Mark::Bar(c, stroke) => {
            let style = c.stroke_width(stroke);
            drawn(area.draw(&PathElement::new(vec![(x, y), (x + width, y)], style)))?;
            for end in [x, x + width] {
                drawn(area.draw(&PathElement::new(vec![(end, y - 5), (end, y + 5)], style)))?;
            }
            Ok(())
        }
        Mark::Star(c) => {
            let points: Vec<(i32, i32)> = star(7.0).into_iter().map(|(dx, dy)| (mid + dx, y + dy)).collect();
            drawn(area.draw(&Polygon::new(points, c.filled())))
        }
        Mark::Swatch(c) => drawn(area.draw(&Rectangle::new([(mid - 6, y - 6), (mid + 6, y + 6)], c.filled()))),
    }
}
