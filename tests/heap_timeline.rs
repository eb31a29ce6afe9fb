//! `memperf heap --timeline`'s SVG as a browser draws it: Debian's chromium renders it
//! headless to a PNG, and the pixels must put the peak marker where the time axis puts the
//! peak. The time is the fixture's own: `fixtures/heapsteps.c` holds each of its three
//! phases for a known time and peaks at the start of the second, so the marker must sit about
//! a third of the way along the axis, on the column where the drawn live-heap line is highest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Command;

use common::*;

/// The SVG's plot area (`src/cmd/heap/timeline.rs`): x pixels of time 0 and of the end.
const PLOT_LEFT: f64 = 90.0;
const PLOT_RIGHT: f64 = 960.0 - 20.0;
/// The y pixel of 0 bytes.
const PLOT_BOTTOM: f64 = 420.0 - 50.0;
/// The peak marker's colour and the live-heap line's.
const MARKER: [u8; 3] = [0x7b, 0x2c, 0xbf];
const LIVE: [u8; 3] = [0xd6, 0x27, 0x28];

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// An 8-bit RGB or RGBA PNG, as (width, height, RGB rows).
struct Image {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

impl Image {
    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }
}

/// Decodes the PNG chromium writes (8-bit, RGB or RGBA, not interlaced).
fn decode_png(bytes: &[u8]) -> Image {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut pos, mut idat, mut head) = (8, Vec::new(), None);
    while pos + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &bytes[pos + 4..pos + 8];
        let data = &bytes[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => head = Some(data.to_vec()),
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        pos += 12 + len;
    }
    let head = head.expect("no IHDR");
    let width = u32::from_be_bytes(head[0..4].try_into().unwrap()) as usize;
    let height = u32::from_be_bytes(head[4..8].try_into().unwrap()) as usize;
    assert_eq!(head[8], 8, "bit depth");
    assert_eq!(head[12], 0, "interlaced");
    let bpp = match head[9] {
        2 => 3,
        6 => 4,
        t => panic!("PNG colour type {t}"),
    };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = width * bpp;
    let mut prev = vec![0u8; stride];
    let mut rgb = Vec::with_capacity(width * height);
    for y in 0..height {
        let line = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let mut cur = line[1..].to_vec();
        for i in 0..stride {
            let a = if i >= bpp { cur[i - bpp] as i32 } else { 0 };
            let b = prev[i] as i32;
            let c = if i >= bpp { prev[i - bpp] as i32 } else { 0 };
            let add = match line[0] {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("PNG filter {f}"),
            };
            cur[i] = cur[i].wrapping_add(add as u8);
        }
        rgb.extend(cur.chunks(bpp).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    Image { width, height, rgb }
}

/// How much of colour `c` pixel `p` is, drawn over white: a line off the pixel grid is
/// blended into two columns, each partly covered (0 when `p` is no such blend).
fn coverage(p: [u8; 3], c: [u8; 3]) -> f64 {
    let (i, _) = c
        .iter()
        .enumerate()
        .max_by_key(|&(_, &v)| 255 - v as i32)
        .unwrap();
    let alpha = (255.0 - p[i] as f64) / (255.0 - c[i] as f64);
    if !(0.2..=1.1).contains(&alpha) {
        return 0.0;
    }
    let fits = (0..3).all(|k| {
        let want = 255.0 - alpha * (255.0 - c[k] as f64);
        (p[k] as f64 - want).abs() <= 20.0
    });
    if fits { alpha.min(1.0) } else { 0.0 }
}

/// Each column's coverage by colour `c` (summed over its rows), and its topmost row of it.
fn columns_of(img: &Image, c: [u8; 3]) -> Vec<(usize, f64, Option<usize>)> {
    (0..img.width)
        .map(|x| {
            let cover: Vec<f64> = (0..img.height).map(|y| coverage(img.at(x, y), c)).collect();
            let top = cover.iter().position(|&a| a >= 0.5);
            (x, cover.iter().sum(), top)
        })
        .collect()
}

fn render(browser: &str, svg: &Path, png: &Path, profile: &Path) {
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--window-size=960,420",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success() && png.exists(),
        "chromium: {}",
        stderr(&o)
    );
}

#[test]
fn a_browser_draws_the_peak_marker_at_the_peaks_time() {
    if !require_perf("heap timeline in a browser") {
        return;
    }
    let Some(browser) = chromium() else {
        if std::env::var("MEMPERF_REQUIRE_PERF").as_deref() == Ok("1") {
            panic!("chromium is required (scripts/test.sh installs it)");
        }
        eprintln!("skipping: chromium is not installed");
        return;
    };
    let dir = scratch();
    let (svg, png) = (dir.path().join("t.svg"), dir.path().join("t.png"));
    let program = fixture("heapsteps", Variant::NoFp);
    // Phases of 400 ms: the peak comes 400 ms after the first allocation, the run ends
    // 1200 ms after it.
    let hold = 0.4;
    {
        let _turn = recording_turn();
        let o = memperf()
            .args(["heap", "-m", "1024", "--timeline"])
            .arg(&svg)
            .arg("--")
            .arg(&program)
            .arg("400")
            .output()
            .unwrap();
        assert!(o.status.success(), "memperf heap: {}", stderr(&o));
    }
    render(browser, &svg, &png, &dir.path().join("profile"));
    let img = decode_png(&std::fs::read(&png).unwrap());
    assert_eq!((img.width, img.height), (960, 420));
    // The marker: a dashed line from the plot's top to its bottom, the only tall run of its
    // colour inside the plot (the axes are black too, but at its left edge and bottom).
    // Its columns are the few whose coverage sums to a long line (the peak's circle and
    // label cover a few pixels a column).
    let marker: Vec<(usize, f64)> = columns_of(&img, MARKER)
        .into_iter()
        .filter(|&(x, cover, _)| x as f64 > PLOT_LEFT + 2.0 && cover >= 30.0)
        .map(|(x, cover, _)| (x, cover))
        .collect();
    assert!(
        !marker.is_empty() && marker.len() <= 3,
        "marker columns {marker:?}"
    );
    let weight: f64 = marker.iter().map(|m| m.1).sum();
    assert!(
        weight > 40.0,
        "a dashed line of {weight} pixels: {marker:?}"
    );
    // A pixel's centre is at x + 0.5.
    let marker_x = marker
        .iter()
        .map(|&(x, c)| (x as f64 + 0.5) * c)
        .sum::<f64>()
        / weight;
    // The drawn live-heap line's highest pixel: the peak's column in the data.
    let live = columns_of(&img, LIVE);
    let inside = |x: usize| x as f64 > PLOT_LEFT + 2.0 && (x as f64) < PLOT_RIGHT - 2.0;
    let top = live
        .iter()
        .filter(|c| inside(c.0))
        .filter_map(|c| c.2)
        .min()
        .unwrap();
    let top_xs: Vec<usize> = live
        .iter()
        .filter(|c| inside(c.0) && c.2 == Some(top))
        .map(|c| c.0)
        .collect();
    assert!(
        top_xs
            .iter()
            .any(|&x| (x as f64 + 0.5 - marker_x).abs() <= 3.0),
        "marker at x {marker_x}, the live line's top at {top_xs:?}"
    );
    // Between calls the live heap holds its value: drawn as steps, flat through each phase,
    // at the fixture's 1000000 B in the first two and 500000 B in the last (half as high
    // over the time axis's row), never a slope from one call to the next.
    let height = |fraction: f64| {
        let x = (PLOT_LEFT + fraction * (PLOT_RIGHT - PLOT_LEFT)) as usize;
        let y = live[x].2.unwrap_or_else(|| panic!("no live line at x {x}"));
        PLOT_BOTTOM - y as f64
    };
    let (grow, after, shrink) = (height(0.15), height(0.5), height(0.85));
    assert!(
        (grow - after).abs() <= 1.0 && (grow - 2.0 * shrink).abs() <= 2.0,
        "live line heights {grow} {after} {shrink}: not 1000000, 1000000, 500000 B"
    );
    // The time axis maps 0 to PLOT_LEFT and the run's end (three holds, and a little) to
    // PLOT_RIGHT: the peak, one hold in, is a third of the way or a little before.
    let t = (marker_x - PLOT_LEFT) / (PLOT_RIGHT - PLOT_LEFT);
    assert!(
        (0.2..0.36).contains(&t),
        "the marker is at {t:.3} of the time axis; the fixture peaks at {hold} s of about {} s",
        3.0 * hold
    );
}
