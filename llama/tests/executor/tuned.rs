//! A tuning table's choices ([`trine_llama::tuned`], what `cargo xtask tune` stores) reach the
//! decode products whose shapes it names, and the step they make agrees with the CPU node by
//! node; a choice that does not fit a product (one row a team where rope takes pairs of rows)
//! leaves that product its default.

use crate::common::*;
use std::sync::Arc;
use trine_gguf::synth::SynthShape;
use trine_gguf::TensorType;
use trine_llama::graph::{Op, Step, Store};
use trine_llama::tuned::{ProductChoice, Tuned};
use trine_llama::Engine;
use trine_ops::matvec_q8_blocks::Teams;

#[test]
fn a_tuned_choice_runs_where_it_names_a_shape() {
    let model = synth(SynthShape {
        n_embd: 256,
        n_ff: 512,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q6_K,
        ..SynthShape::TINY
    });
    let backend = gpu();
    let decode = Step { tokens: 1, pos: 0 };
    let empty = Arc::new(Tuned::empty(backend.info()));
    let plain = Engine::with_tuned(model.clone(), backend.clone(), SIZES, empty).unwrap();
    let nodes = plain.graph(decode).unwrap();
    let defaults: Vec<_> = nodes
        .iter()
        .filter_map(|n| plain.blocks_product(n).map(|b| (n.label, b)))
        .collect();
    assert!(defaults.len() >= 4, "{defaults:?}");
    let choice = (1, Teams::pairs(1));
    assert!(defaults
        .iter()
        .all(|(_, b)| (b.per_team, b.teams) != choice));
    let mut tuned = Tuned::empty(backend.info());
    for (_, b) in &defaults {
        tuned.products.push(ProductChoice {
            weights: b.weights.name().into(),
            rows: b.rows,
            cols: b.cols,
            rows_per_team: choice.0,
            team_width: choice.1.width,
            units: choice.1.units,
            steps: choice.1.steps,
            median_us: 1.0,
            default_us: 2.0,
        });
    }
    let engine = Engine::with_tuned(model, backend, SIZES, Arc::new(tuned)).unwrap();
    let mut rope = 0;
    let tuned_nodes = engine.graph(decode).unwrap();
    let products = tuned_nodes
        .iter()
        .filter_map(|n| engine.blocks_product(n).map(|b| (n, b)));
    assert_eq!(products.clone().count(), defaults.len());
    for ((n, b), (label, default)) in products.zip(&defaults) {
        assert_eq!(n.label, *label);
        if matches!(
            n.op,
            Op::Product {
                store: Store::Rope { .. },
                ..
            }
        ) {
            rope += 1;
            assert_eq!(
                b, *default,
                "{label}: rope's pairs of rows keep the default"
            );
        } else {
            assert_eq!((b.per_team, b.teams), choice, "{label}");
        }
    }
    assert!(rope > 0, "the stand-in folds rope into the QKV products");
    let checker = engine.checker(cpu()).unwrap();
    agree("tuned decode products", engine, checker);
}
