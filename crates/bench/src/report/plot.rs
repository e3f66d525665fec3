//! Charts laid out like the papers' figures, each written as SVG and PNG: grouped bars (one
//! group per category, one bar per series), stacked bars (phase breakdowns) and lines.

use lodestore::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

const SIZE: (u32, u32) = (1000, 600);
const FONT: &str = "sans-serif";

/// Plotters draws text with a font registered once from the DejaVu family built into the
/// binary, so plots need nothing from the machine.
fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_err()
        {
            tracing::warn!("could not register the plot font; text may be missing from plots");
        }
    });
}

fn plot_error(path: &Path, error: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("could not draw {}: {error}", path.display()))
}

fn color(index: usize) -> RGBColor {
    // Twenty distinguishable colours: every scheme gets its own.
    const PALETTE: [RGBColor; 20] = [
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
        RGBColor(0, 0, 0),
        RGBColor(174, 199, 232),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
        RGBColor(255, 152, 150),
        RGBColor(197, 176, 213),
        RGBColor(196, 156, 148),
        RGBColor(0, 90, 50),
        RGBColor(120, 0, 60),
        RGBColor(90, 90, 0),
    ];
    PALETTE[index % PALETTE.len()]
}

fn upper(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.1
    } else {
        1.0
    }
}

/// A chart generic over the backend, so one function draws both files.
macro_rules! grouped_bars_body {
    ($area:expr, $title:expr, $y_label:expr, $categories:expr, $series:expr, $stacked:expr) => {{
        let area = $area;
        area.fill(&WHITE).map_err(|e| e.to_string())?;
        let categories: &[String] = $categories;
        let series: &[(String, Vec<f64>)] = $series;
        let stacked: bool = $stacked;
        let max = if stacked {
            (0..categories.len())
                .map(|c| {
                    series
                        .iter()
                        .map(|s| s.1.get(c).copied().unwrap_or(0.0))
                        .sum::<f64>()
                })
                .fold(0.0, f64::max)
        } else {
            series
                .iter()
                .flat_map(|s| s.1.iter().copied())
                .fold(0.0, f64::max)
        };
        let mut chart = ChartBuilder::on(area)
            .caption($title, (FONT, 22))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..categories.len() as f64, 0.0..upper(max))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(categories.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let index = x.floor() as usize;
                if (x - index as f64 - 0.5).abs() < 0.01 {
                    categories.get(index).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_label_style((FONT, 13).into_font().transform(FontTransform::Rotate90))
            .y_desc($y_label)
            .label_style((FONT, 14))
            .draw()
            .map_err(|e| e.to_string())?;
        let width = 0.8
            / if stacked {
                1.0
            } else {
                series.len().max(1) as f64
            };
        for (s, (name, values)) in series.iter().enumerate() {
            let bars = values.iter().enumerate().map(|(c, &value)| {
                let (left, bottom) = if stacked {
                    let below: f64 = series[..s]
                        .iter()
                        .map(|t| t.1.get(c).copied().unwrap_or(0.0))
                        .sum();
                    (c as f64 + 0.1, below)
                } else {
                    (c as f64 + 0.1 + s as f64 * width, 0.0)
                };
                Rectangle::new(
                    [(left, bottom), (left + width, bottom + value)],
                    color(s).filled(),
                )
            });
            chart
                .draw_series(bars)
                .map_err(|e| e.to_string())?
                .label(name.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color(s).filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }};
}

/// The legend box every chart draws.
fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .position(position)
        .draw()
        .map_err(|e| e.to_string())
}

/// Bars side by side: for each category, one bar per series.
pub fn grouped_bars(
    stem: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<()> {
    both_dyn(
        stem,
        bar_chart_size(categories.len()),
        |svg| grouped_bars_body!(svg, title, y_label, categories, series, false),
        |png| grouped_bars_body!(png, title, y_label, categories, series, false),
    )
}

/// Bars stacked: for each category, the series on top of each other (phase breakdowns).
pub fn stacked_bars(
    stem: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<()> {
    both_dyn(
        stem,
        bar_chart_size(categories.len()),
        |svg| grouped_bars_body!(svg, title, y_label, categories, series, true),
        |png| grouped_bars_body!(png, title, y_label, categories, series, true),
    )
}

/// Whole-number x axes spanning at most this many units get a tick at every whole number.
const WHOLE_TICKS_MAX: f64 = 20.0;

macro_rules! lines_body {
    ($area:expr, $title:expr, $x_label:expr, $y_label:expr, $series:expr) => {{
        let area = $area;
        area.fill(&WHITE).map_err(|e| e.to_string())?;
        let series: &[(String, Vec<(f64, f64)>)] = $series;
        let points = series.iter().flat_map(|s| s.1.iter());
        // Whole-number x values (client counts, traversals per commit) get whole-number ticks.
        let whole_x = series
            .iter()
            .flat_map(|s| s.1.iter())
            .all(|&(x, _)| x.fract() == 0.0);
        let (mut x_min, mut x_max, mut y_max) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
        if x_min > x_max {
            (x_min, x_max) = (0.0, 1.0);
        }
        if x_min == x_max {
            x_max = x_min + 1.0;
        }
        let mut chart = ChartBuilder::on(area)
            .caption($title, (FONT, 22))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(x_min..x_max, 0.0..upper(y_max))
            .map_err(|e| e.to_string())?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc($x_label)
            .y_desc($y_label)
            .label_style((FONT, 14));
        let whole_format = |v: &f64| format!("{v:.0}");
        if whole_x && x_max - x_min <= WHOLE_TICKS_MAX {
            mesh.x_labels((x_max - x_min) as usize + 1)
                .x_label_formatter(&whole_format);
        }
        if y_max >= 100.0 {
            mesh.y_label_formatter(&whole_format);
        }
        mesh.draw().map_err(|e| e.to_string())?;
        for (s, (name, values)) in series.iter().enumerate() {
            let style = color(s).stroke_width(2);
            chart
                .draw_series(LineSeries::new(values.iter().copied(), style))
                .map_err(|e| e.to_string())?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color(s).stroke_width(2))
                });
            chart
                .draw_series(
                    values
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color(s).filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }};
}

/// One line per series through its (x, y) points.
pub fn lines(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    both_dyn(
        stem,
        SIZE,
        |svg| lines_body!(svg, title, x_label, y_label, series),
        |png| lines_body!(png, title, x_label, y_label, series),
    )
}

/// Wide enough that every category's label has room.
fn bar_chart_size(categories: usize) -> (u32, u32) {
    (SIZE.0.max(80 * categories as u32 + 150), SIZE.1)
}

fn both_dyn(
    stem: &Path,
    size: (u32, u32),
    svg_draw: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> std::result::Result<(), String>,
    png_draw: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> std::result::Result<(), String>,
) -> Result<()> {
    register_font();
    let svg = with_extension(stem, "svg");
    {
        let area = SVGBackend::new(&svg, size).into_drawing_area();
        svg_draw(&area).map_err(|e| plot_error(&svg, e))?;
        area.present().map_err(|e| plot_error(&svg, e))?;
    }
    let png = with_extension(stem, "png");
    {
        let area = BitMapBackend::new(&png, size).into_drawing_area();
        png_draw(&area).map_err(|e| plot_error(&png, e))?;
        area.present().map_err(|e| plot_error(&png, e))?;
    }
    Ok(())
}

/// `stem` with `.ext` appended (stems may hold dots, as in `p0.05`).
fn with_extension(stem: &Path, ext: &str) -> std::path::PathBuf {
    let mut name = stem.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    name.into()
}
