//! Special functions the models need: the Gamma function (Weibull moments) and
//! the principal branch of Lambert's W (exact optimum of Daly's model).

use std::f64::consts::PI;

const LANCZOS_G: f64 = 7.0;
const LANCZOS: [f64; 9] = [
    0.999_999_999_999_809_9,
    676.520_368_121_885_1,
    -1_259.139_216_722_402_8,
    771.323_428_777_653_1,
    -176.615_029_162_140_6,
    12.507_343_278_686_905,
    -0.138_571_095_265_720_12,
    9.984_369_578_019_572e-6,
    1.505_632_735_149_311_6e-7,
];

/// The Gamma function Γ(x) (Lanczos approximation, relative error ~1e-15 for
/// the arguments used here; reflection formula below 1/2).
pub fn gamma(x: f64) -> f64 {
    if x < 0.5 {
        PI / ((PI * x).sin() * gamma(1.0 - x))
    } else {
        let x = x - 1.0;
        let t = x + LANCZOS_G + 0.5;
        let mut a = LANCZOS[0];
        for (i, c) in LANCZOS.iter().enumerate().skip(1) {
            a += c / (x + i as f64);
        }
        (2.0 * PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
    }
}

/// Principal branch W₀(x) of Lambert's W for `x >= -1/e` (Halley iteration).
/// Returns NaN below `-1/e`.
pub fn lambert_w0(x: f64) -> f64 {
    let branch = -1.0 / std::f64::consts::E;
    if x.is_nan() || x < branch {
        return f64::NAN;
    }
    if x == branch {
        return -1.0;
    }
    // Start: series around the branch point for x near -1/e, else log-based.
    let mut w = if x < -0.25 {
        let p = (2.0 * (std::f64::consts::E * x + 1.0)).sqrt();
        -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p
    } else if x < 3.0 {
        0.5 * (1.0 + x).ln()
    } else {
        let l = x.ln();
        l - l.ln()
    };
    for _ in 0..64 {
        let ew = w.exp();
        let f = w * ew - x;
        let wp1 = w + 1.0;
        if wp1.abs() < 1e-300 {
            break;
        }
        let denom = ew * wp1 - (w + 2.0) * f / (2.0 * wp1);
        let step = f / denom;
        w -= step;
        if step.abs() <= 1e-15 * (1.0 + w.abs()) {
            break;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_known_values() {
        assert!((gamma(5.0) - 24.0).abs() < 1e-10);
        assert!((gamma(0.5) - PI.sqrt()).abs() < 1e-12);
        assert!((gamma(1.0) - 1.0).abs() < 1e-13);
        // Γ(1 + 1/0.7) = Γ(2.428571...) = 1.265 823 (tables)
        assert!((gamma(1.0 + 1.0 / 0.7) - 1.265_823).abs() < 1e-5);
    }

    #[test]
    fn lambert_w_inverts_w_exp_w() {
        for &x in &[-0.367, -0.3, -0.1, 0.0, 0.5, 1.0, 10.0] {
            let w = lambert_w0(x);
            assert!((w * w.exp() - x).abs() < 1e-12, "x={x} w={w}");
        }
        assert!((lambert_w0(1.0) - 0.567_143_290_409_783_8).abs() < 1e-14);
    }
}
