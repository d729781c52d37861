//! Kernel choices measured on one device by `cargo xtask tune`, kept in the cache directory
//! (`<cache>/tuning/<device>.json`): where a table names a decode product's shape, the
//! planner takes its choice over the tuning table's default for that shape
//! ([`crate::tuning::q8_blocks_teams`], [`crate::tuning::q8_blocks_rows_per_team`]). A device
//! never tuned, or a shape the table does not name, takes the defaults.
//!
//! A table is keyed by the device as its backend reports it (backend, name, driver) and by
//! trine's version, whose kernels it was measured with: another driver or another trine
//! finds no table and runs the defaults until tuned again.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;
use trine_backends::{cache, DeviceInfo};
use trine_gguf::quant::WeightType;
use trine_ops::matvec_q8_blocks::Teams;

/// The cache namespace of tuning tables.
pub const NAMESPACE: &str = "tuning";

/// The layout of a table file; another is ignored (with a note) as if absent.
pub const FORMAT: u32 = 1;

/// One device's measured choices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tuned {
    pub format: u32,
    /// The device it was measured on ([`device_key`]).
    pub device: String,
    pub products: Vec<ProductChoice>,
}

/// The choice for a GPU decode product on the weights' blocks
/// ([`trine_ops::matvec_q8_blocks`]) of `rows` × `cols` weights of type `weights` (as the
/// device reads them: Q4_0, Q4_1 and Q8_0 in groups of eight blocks), with the times that
/// chose it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProductChoice {
    pub weights: String,
    pub rows: u32,
    pub cols: u32,
    pub rows_per_team: u32,
    /// Invocations of a team (32, or the workgroup's 128).
    pub team_width: u32,
    /// Units an invocation takes a step.
    pub units: u32,
    /// Steps an iteration.
    pub steps: u32,
    /// The median device time of the chosen kernel and of the default's, in microseconds.
    pub median_us: f64,
    pub default_us: f64,
}

impl ProductChoice {
    /// The product it is for: the weights' type name, rows, columns.
    pub fn shape(&self) -> (&str, u32, u32) {
        (&self.weights, self.rows, self.cols)
    }

    pub fn teams(&self) -> Teams {
        Teams {
            width: self.team_width,
            units: self.units,
            steps: self.steps,
        }
    }
}

/// Why a table on disk is not used.
#[derive(Debug, Error)]
pub enum TunedError {
    #[error("the tuning table {} is not valid JSON of format {FORMAT}: {why}", .path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("the tuning table {} has format {found}; this trine reads format {FORMAT}", .path.display())]
    Format { path: PathBuf, found: u32 },
    #[error("the tuning table {} was measured on {found}, not on {expected}", .path.display())]
    Device {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("the tuning table {} names weights of type {ty:?}, which trine does not know", .path.display())]
    Weights { path: PathBuf, ty: String },
}

/// The key a device's table is stored under: its backend, name and driver, and trine's
/// version, in the characters a cache key allows.
pub fn device_key(info: &DeviceInfo) -> String {
    key_of(&info.backend, &info.name, &info.driver)
}

fn key_of(backend: &str, name: &str, driver: &str) -> String {
    let raw = format!(
        "{backend}-{name}-{driver}-trine{}",
        env!("CARGO_PKG_VERSION")
    );
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn file_key(info: &DeviceInfo) -> String {
    format!("{}.json", device_key(info))
}

/// Where `info`'s table lives, where there is a cache directory.
pub fn path(info: &DeviceInfo) -> Option<PathBuf> {
    cache::cache_dir().map(|d| d.join(NAMESPACE).join(file_key(info)))
}

impl Tuned {
    /// An empty table for `info`: every shape takes its default.
    pub fn empty(info: &DeviceInfo) -> Tuned {
        Tuned::for_key(device_key(info))
    }

    fn for_key(device: String) -> Tuned {
        Tuned {
            format: FORMAT,
            device,
            products: vec![],
        }
    }

    /// `info`'s table from the cache: `Ok(None)` where there is none.
    pub fn load(info: &DeviceInfo) -> Result<Option<Tuned>, TunedError> {
        let Some(bytes) = cache::load(NAMESPACE, &file_key(info)) else {
            return Ok(None);
        };
        let path = path(info).unwrap_or_default();
        let t: Tuned = serde_json::from_slice(&bytes).map_err(|e| TunedError::Unreadable {
            path: path.clone(),
            why: e.to_string(),
        })?;
        t.check(&device_key(info), path).map(Some)
    }

    fn check(self, expected: &str, path: PathBuf) -> Result<Tuned, TunedError> {
        if self.format != FORMAT {
            return Err(TunedError::Format {
                path,
                found: self.format,
            });
        }
        if self.device != expected {
            return Err(TunedError::Device {
                path,
                found: self.device,
                expected: expected.into(),
            });
        }
        if let Some(p) = self
            .products
            .iter()
            .find(|p| weight_type(&p.weights).is_none())
        {
            return Err(TunedError::Weights {
                path,
                ty: p.weights.clone(),
            });
        }
        Ok(self)
    }

    /// What the table holds, in words: the executor's note and `trine doctor`'s row say it.
    pub fn summary(&self) -> String {
        format!(
            "kernel choices measured by `cargo xtask tune` for {} decode products",
            self.products.len()
        )
    }

    /// Stores the table in the cache as `info`'s: its path.
    pub fn store(&self, info: &DeviceInfo) -> std::io::Result<PathBuf> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        cache::store(NAMESPACE, &file_key(info), &json)?;
        Ok(path(info).unwrap_or_default())
    }

    /// The measured (rows per team, teams) of a decode product on `ty` blocks of `rows` ×
    /// `cols`, where the table names that shape.
    pub fn blocks_product(&self, ty: WeightType, rows: u32, cols: u32) -> Option<(u32, Teams)> {
        self.products
            .iter()
            .find(|p| p.shape() == (ty.name(), rows, cols))
            .map(|p| (p.rows_per_team, p.teams()))
    }
}

/// The weight type named `name` as [`WeightType::name`] spells it, the grouped layouts too.
pub fn weight_type(name: &str) -> Option<WeightType> {
    WeightType::ALL
        .iter()
        .copied()
        .chain(WeightType::ALL.iter().filter_map(|t| t.grouped()))
        .find(|t| t.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        key_of("vulkan", "Some GPU (RADV 1103)", "Mesa 24.2/x")
    }

    fn choice(ty: WeightType, rows: u32, cols: u32) -> ProductChoice {
        ProductChoice {
            weights: ty.name().into(),
            rows,
            cols,
            rows_per_team: 4,
            team_width: 32,
            units: 2,
            steps: 1,
            median_us: 10.0,
            default_us: 12.0,
        }
    }

    #[test]
    fn a_device_key_is_a_plain_file_name() {
        let k = key();
        assert!(
            k.starts_with("vulkan-Some_GPU__RADV_1103_-Mesa_24.2_x-trine"),
            "{k}"
        );
        assert!(k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    }

    #[test]
    fn lookup_names_type_rows_and_columns() {
        let mut t = Tuned::for_key(key());
        t.products.push(choice(WeightType::Q4_K, 6144, 4096));
        let teams = Teams::pairs(1);
        assert_eq!(
            t.blocks_product(WeightType::Q4_K, 6144, 4096),
            Some((4, teams))
        );
        assert_eq!(t.blocks_product(WeightType::Q6_K, 6144, 4096), None);
        assert_eq!(t.blocks_product(WeightType::Q4_K, 4096, 4096), None);
    }

    #[test]
    fn a_table_for_another_device_or_format_is_refused() {
        let mut t = Tuned::for_key(key());
        t.products.push(choice(WeightType::Q4_0x8, 8, 256));
        let json = serde_json::to_vec(&t).unwrap();
        let back: Tuned = serde_json::from_slice(&json).unwrap();
        let key = key();
        assert_eq!(back.clone().check(&key, PathBuf::new()).unwrap(), t);
        assert!(matches!(
            back.clone().check("cuda-other", PathBuf::new()),
            Err(TunedError::Device { .. })
        ));
        let old = Tuned { format: 0, ..back };
        assert!(matches!(
            old.check(&key, PathBuf::new()),
            Err(TunedError::Format { found: 0, .. })
        ));
        let mut odd = Tuned::for_key(key.clone());
        odd.products.push(ProductChoice {
            weights: "q9_z".into(),
            ..choice(WeightType::Q4_K, 1, 256)
        });
        let e = odd.check(&key, PathBuf::from("/c/t.json")).unwrap_err();
        assert!(e.to_string().contains("\"q9_z\""), "{e}");
    }
}
