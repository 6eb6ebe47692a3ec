//! The loss curve as an SVG string, drawn with plotters.

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
