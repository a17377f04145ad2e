//! PNG bar charts of cost ratios (plotters' bitmap backend, text through
//! ab_glyph from a TrueType file found at run time).

use crate::error::PolicyError;
use crate::sim::{Strategy, StrategyResult};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::OnceLock;

const FONT_CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a sans-serif font with plotters once per process.
fn ensure_font() -> Result<(), PolicyError> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = FONT.get_or_init(|| {
        let mut tried = Vec::new();
        let env = std::env::var("CKPTFS_FONT").ok();
        for path in env.iter().map(String::as_str).chain(FONT_CANDIDATES) {
            tried.push(path.to_string());
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps fonts for the whole process: leak once.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(tried.join(", "))
    });
    r.clone().map_err(|tried| PolicyError::NoFont { tried })
}

/// One group of bars.
pub(crate) struct Group<'a> {
    pub label: &'a str,
    pub results: &'a [StrategyResult],
}

fn short(s: &Strategy) -> String {
    match s {
        Strategy::Adaptive(p) => format!("F.{:02.0}", p.f_measure() * 100.0),
        Strategy::Fixed(crate::Level::Local) => "local".into(),
        Strategy::Fixed(crate::Level::Partner) => "mem".into(),
        Strategy::Fixed(crate::Level::Pfs) => "disk".into(),
    }
}

fn nice_step(max: f64) -> f64 {
    let raw = max / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= raw {
            return m * mag;
        }
    }
    10.0 * mag
}

/// Draws grouped, stacked bars (rework, checkpoint, restart as % of S·τ).
/// Bars far above the others (memory-only's ~100 % rework) are clipped and
/// labelled with their value.
pub(crate) fn bar_chart(
    path: &Path,
    title: &str,
    x_axis: &str,
    groups: &[Group<'_>],
) -> Result<(), PolicyError> {
    ensure_font()?;
    let perr = |e: &dyn std::fmt::Display| PolicyError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let (w, h) = (1100i32, 620i32);
    let (left, right, top, bottom) = (80i32, 250i32, 50i32, 95i32);
    let (pw, ph) = (w - left - right, h - top - bottom);

    // y range: ignore outliers (> 3x the median total) when sizing the axis.
    let mut totals: Vec<f64> = groups
        .iter()
        .flat_map(|g| g.results.iter().map(|r| r.ratios.total * 100.0))
        .collect();
    totals.sort_by(f64::total_cmp);
    let median = totals.get(totals.len() / 2).copied().unwrap_or(1.0);
    let kept_max = totals
        .iter()
        .copied()
        .filter(|t| *t <= 3.0 * median.max(1e-9))
        .fold(0.0f64, f64::max);
    let step = nice_step((kept_max * 1.15).max(0.1));
    let ymax = (kept_max * 1.15 / step).ceil().max(1.0) * step;
    let y = |v: f64| top + ph - ((v.min(ymax) / ymax) * f64::from(ph)).round() as i32;

    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(&e))?;
    let font = |size: f64| ("sans-serif", size).into_font();
    let text = |s: &str, x: i32, yy: i32, size: f64, hpos: HPos, vpos: VPos| {
        Text::new(
            s.to_string(),
            (x, yy),
            TextStyle::from(font(size)).pos(Pos::new(hpos, vpos)),
        )
    };

    root.draw(&text(title, w / 2, 15, 20.0, HPos::Center, VPos::Top))
        .map_err(|e| perr(&e))?;

    // Grid and y labels.
    let mut v = 0.0;
    while v <= ymax + 1e-9 {
        let yy = y(v);
        root.draw(&PathElement::new(
            vec![(left, yy), (left + pw, yy)],
            RGBColor(225, 225, 225),
        ))
        .map_err(|e| perr(&e))?;
        let label = if step < 1.0 {
            format!("{v:.1}%")
        } else {
            format!("{v:.0}%")
        };
        root.draw(&text(&label, left - 8, yy, 14.0, HPos::Right, VPos::Center))
            .map_err(|e| perr(&e))?;
        v += step;
    }
    root.draw(&Text::new(
        "cost / (S x tau)".to_string(),
        (18, top + ph / 2),
        TextStyle::from(font(15.0).transform(FontTransform::Rotate270))
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))
    .map_err(|e| perr(&e))?;

    let colors = [
        ("rework", RGBColor(192, 57, 43)),
        ("checkpoint", RGBColor(41, 128, 185)),
        ("restart", RGBColor(243, 156, 18)),
    ];
    let ng = groups.len().max(1) as i32;
    let gw = pw / ng;
    for (gi, g) in groups.iter().enumerate() {
        let gx = left + gi as i32 * gw;
        let nb = g.results.len().max(1) as i32;
        let bw = (gw * 8 / 10) / nb;
        let x0 = gx + gw / 10;
        for (bi, r) in g.results.iter().enumerate() {
            let bx = x0 + bi as i32 * bw;
            let parts = [
                r.ratios.rework * 100.0,
                r.ratios.checkpoint * 100.0,
                r.ratios.restart * 100.0,
            ];
            let mut base = 0.0;
            for (p, (_, c)) in parts.iter().zip(colors.iter()) {
                let (y0, y1) = (y(base), y(base + p));
                if y0 > y1 {
                    root.draw(&Rectangle::new([(bx + 2, y1), (bx + bw - 2, y0)], c.filled()))
                        .map_err(|e| perr(&e))?;
                }
                base += p;
            }
            let total = r.ratios.total * 100.0;
            if total > ymax {
                // Clipped: a white notch and the value on top.
                let ny = y(ymax * 0.93);
                root.draw(&Rectangle::new(
                    [(bx + 1, ny - 3), (bx + bw - 1, ny + 3)],
                    WHITE.filled(),
                ))
                .map_err(|e| perr(&e))?;
                root.draw(&text(
                    &format!("{total:.0}%"),
                    bx + bw / 2,
                    top - 2,
                    12.0,
                    HPos::Center,
                    VPos::Bottom,
                ))
                .map_err(|e| perr(&e))?;
            }
            root.draw(&text(
                &short(&r.spec),
                bx + bw / 2,
                top + ph + 6,
                12.0,
                HPos::Center,
                VPos::Top,
            ))
            .map_err(|e| perr(&e))?;
        }
        root.draw(&text(
            g.label,
            gx + gw / 2,
            top + ph + 28,
            15.0,
            HPos::Center,
            VPos::Top,
        ))
        .map_err(|e| perr(&e))?;
    }
    root.draw(&text(
        x_axis,
        left + pw / 2,
        h - 22,
        15.0,
        HPos::Center,
        VPos::Center,
    ))
    .map_err(|e| perr(&e))?;
    // Axes.
    root.draw(&PathElement::new(
        vec![(left, top), (left, top + ph), (left + pw, top + ph)],
        BLACK,
    ))
    .map_err(|e| perr(&e))?;

    // Legend.
    let lx = left + pw + 25;
    let mut ly = top + 10;
    for (name, c) in &colors {
        root.draw(&Rectangle::new([(lx, ly), (lx + 16, ly + 16)], c.filled()))
            .map_err(|e| perr(&e))?;
        root.draw(&text(name, lx + 24, ly + 8, 14.0, HPos::Left, VPos::Center))
            .map_err(|e| perr(&e))?;
        ly += 24;
    }
    ly += 12;
    if let Some(g) = groups.first() {
        for r in g.results {
            let desc = match r.spec {
                Strategy::Adaptive(p) => format!("adaptive, P={:.2} R={:.2}", p.precision, p.recall),
                s => s.name().to_string(),
            };
            root.draw(&text(
                &format!("{:<5} {desc}", short(&r.spec)),
                lx,
                ly,
                13.0,
                HPos::Left,
                VPos::Center,
            ))
            .map_err(|e| perr(&e))?;
            ly += 20;
        }
    }
    root.present().map_err(|e| perr(&e))?;
    Ok(())
}
