//! The sampling flags `trine generate` and `trine chat` share, named as llama.cpp names them,
//! with llama.cpp's defaults except the temperature (0: greedy, so that a run repeats).

use clap::Args as ClapArgs;
use std::hash::{BuildHasher, Hasher};
use trine_llama::{Penalties, Sampling};

#[derive(ClapArgs)]
pub struct SamplingArgs {
    /// Sampling temperature: 0 is greedy (the most likely token every time, after the
    /// penalties); above 0, tokens are drawn, more varied as it grows.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = temperature)]
    temp: f32,
    /// With --temp above 0: draw from the K most likely tokens only (0: all of them).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// With --temp above 0: draw from the most likely tokens whose probabilities add up to P,
    /// in (0, 1] (1: all of them).
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true, value_parser = top_p)]
    top_p: f32,
    /// With --temp above 0: draw only from tokens at least P times as likely as the most
    /// likely one, in [0, 1] (0: all of them).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true, value_parser = min_p, value_name = "P")]
    min_p: f32,
    /// Divide the logit of each token seen in the last --repeat-last-n tokens by this
    /// (multiply it where it is 0 or less); 1 is off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = repeat_penalty, value_name = "R")]
    repeat_penalty: f32,
    /// How many of the context's last tokens (prompt and generated) the penalties look at;
    /// 0 turns them off.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true, value_parser = window, value_name = "N")]
    repeat_last_n: usize,
    /// Subtract this from the logit of each token seen in the window, once; 0 is off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = finite, value_name = "P")]
    presence_penalty: f32,
    /// Subtract this times its count in the window from each token's logit; 0 is off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = finite, value_name = "F")]
    frequency_penalty: f32,
    /// With --temp above 0: the seed of the draws; the same seed repeats a run. Without it,
    /// one is drawn and printed.
    #[arg(long)]
    seed: Option<u64>,
}

impl SamplingArgs {
    /// The options, and whether the seed was drawn here (and must be printed to repeat the
    /// run).
    pub fn sampling(&self) -> (Sampling, bool) {
        let draws = self.temp > 0.0;
        let seed = self
            .seed
            .unwrap_or_else(|| if draws { drawn_seed() } else { 0 });
        let sampling = Sampling {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            penalties: Penalties {
                last_n: self.repeat_last_n,
                repeat: self.repeat_penalty,
                frequency: self.frequency_penalty,
                presence: self.presence_penalty,
            },
            seed,
        };
        (sampling, draws && self.seed.is_none())
    }
}

/// A seed no two runs share: the standard library's hasher keys come from the OS's random
/// source, and the clock and process id separate runs on a system without one.
fn drawn_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

fn number(s: &str) -> Result<f32, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn temperature(s: &str) -> Result<f32, String> {
    let t = number(s)?;
    if t.is_finite() && t >= 0.0 {
        Ok(t)
    } else {
        Err("a temperature is 0 (greedy) or more".into())
    }
}

fn top_p(s: &str) -> Result<f32, String> {
    let p = number(s)?;
    if p > 0.0 && p <= 1.0 {
        Ok(p)
    } else {
        Err("top-p is a probability above 0 and at most 1".into())
    }
}

fn min_p(s: &str) -> Result<f32, String> {
    let p = number(s)?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err("min-p is a fraction from 0 to 1".into())
    }
}

fn repeat_penalty(s: &str) -> Result<f32, String> {
    let p = number(s)?;
    if p.is_finite() && p > 0.0 && (1.0 / p).is_finite() {
        Ok(p)
    } else {
        Err("the repeat penalty is finite and above 0 (1 is off)".into())
    }
}

fn window(s: &str) -> Result<usize, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => usize::try_from(n).map_err(|e| e.to_string()),
        Ok(_) => Err("the penalties' window is 0 tokens (off) or more".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn finite(s: &str) -> Result<f32, String> {
    let p = number(s)?;
    if p.is_finite() {
        Ok(p)
    } else {
        Err("a penalty is a finite number (0 is off)".into())
    }
}
