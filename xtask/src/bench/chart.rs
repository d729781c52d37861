//! The SVG chart: two panels of grouped bars, one group per model × step × node and one bar
//! per backend: the median time (log scale) above, the share of the copy roof (%) below.

use super::report::Record;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The measured records grouped for the chart: labels, backends and (group, backend, value).
struct Bars {
    groups: Vec<String>,
    backends: Vec<String>,
    time: Vec<(usize, usize, f64)>,
    roof: Vec<(usize, usize, f64)>,
}

fn bars(records: &[Record]) -> Bars {
    let mut b = Bars {
        groups: vec![],
        backends: vec![],
        time: vec![],
        roof: vec![],
    };
    for r in records {
        let Some(t) = &r.timing else { continue };
        let label = format!("{} {} {}", r.model, r.step, r.node);
        let g = index_of(&mut b.groups, label);
        let k = index_of(&mut b.backends, r.backend.clone());
        b.time.push((g, k, t.median_us));
        b.roof.push((g, k, t.copy_roof_percent));
    }
    b
}

fn index_of(list: &mut Vec<String>, item: String) -> usize {
    list.iter().position(|x| *x == item).unwrap_or_else(|| {
        list.push(item);
        list.len() - 1
    })
}

type Panel<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn draw_panel<Y>(
    area: &Panel<'_>,
    b: &Bars,
    caption: &str,
    y: Y,
    floor: f64,
    values: &[(usize, usize, f64)],
) -> Result<(), String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let groups = b.groups.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(260)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups as f64, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .draw()
        .map_err(|e| e.to_string())?;
    // The mesh centres rotated labels on their tick, which puts half of each one over the
    // bars: they are drawn here instead, starting below the axis and running down.
    let style = TextStyle::from(("sans-serif", 11).into_font())
        .transform(FontTransform::Rotate90)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let (bx, by) = area.get_base_pixel();
    for (g, label) in b.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, floor));
        area.draw(&Text::new(label.as_str(), (x - bx, y - by + 6), &style))
            .map_err(|e| e.to_string())?;
    }
    let width = 0.8 / b.backends.len().max(1) as f64;
    for (k, name) in b.backends.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let rects = values.iter().filter(|v| v.1 == k).map(|&(g, _, v)| {
            let x0 = g as f64 + 0.1 + k as f64 * width;
            Rectangle::new([(x0, floor), (x0 + width, v.max(floor))], color.filled())
        });
        chart
            .draw_series(rects)
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

pub fn svg(path: &Path, records: &[Record]) -> Result<(), String> {
    let b = bars(records);
    let width = (b.groups.len() as u32 * 14 * b.backends.len().max(1) as u32).max(1000);
    let root = SVGBackend::new(path, (width + 100, 1400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(700);
    let times = b.time.iter().map(|v| v.2);
    let lo = times.clone().fold(f64::INFINITY, f64::min).min(1.0) / 2.0;
    let hi = times.fold(1.0f64, f64::max) * 2.0;
    draw_panel(
        &top,
        &b,
        "median time per node (µs, log scale)",
        (lo..hi).log_scale(),
        lo,
        &b.time,
    )?;
    let top_roof = b.roof.iter().map(|v| v.2).fold(100.0f64, f64::max) * 1.05;
    draw_panel(
        &bottom,
        &b,
        "% of the copy bandwidth (over 100: from a cache)",
        0f64..top_roof,
        0.0,
        &b.roof,
    )?;
    root.present().map_err(|e| e.to_string())
}
