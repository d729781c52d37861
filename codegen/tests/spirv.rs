//! The naga lowering: a spread of small kernels through naga's validator, the SPIR-V writer
//! and `spirv-val` (Vulkan 1.1 and 1.3), and the WGSL writer.
//!
//! Without `spirv-val` on PATH the check says so and passes, unless `TRINE_REQUIRE_TOOLS`
//! names it.

mod common;

use common::{quant_loads, saxpy, tiled_product};
use std::process::Command;
use trine_codegen::{naga_module, spirv, wgsl, CodegenError, SpirvOptions};
use trine_ir::{Access, BinaryOp, Kernel, KernelBuilder, Literal, Scalar, SubgroupOp, UnaryOp};

/// f16 buffers, literals, a private accumulator and shared memory; casts both ways.
fn f16_mix() -> Kernel {
    let k = KernelBuilder::new("f16_mix", [32, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::Write);
    let z = k.buffer("z", Scalar::F32, Access::Write);
    let tile = k.shared("tile", Scalar::F16, 32);
    let i = k.global_id(0);
    let l = k.local_index();
    let acc = k.var("acc", Scalar::F16);
    let v = k.load(x, i);
    acc.set(acc.get() + v * k.f16(0.5));
    acc.set(acc.get().fma(v, k.f16(-1.25)));
    k.store_shared(tile, l, acc.get());
    k.barrier();
    let other = k.load_shared(tile, k.u32(31) - l);
    k.store(y, i, other.max(k.lit(Literal::F16(0x7c00))));
    let wide = other.cast(Scalar::F32) * k.f32(3.0);
    k.store(z, i, wide + k.f32(1.5).cast(Scalar::F16).cast(Scalar::F32));
    k.finish()
}

/// Integer bit operations: shifts by literal (also past 31) and computed amounts, popcount.
fn bit_ops() -> Kernel {
    let k = KernelBuilder::new("bit_ops", [64, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let out_u = k.buffer("out_u", Scalar::U32, Access::Write);
    let out_i = k.buffer("out_i", Scalar::I32, Access::Write);
    let i = k.global_id(0);
    let x = k.load(a, i);
    let s = x & k.u32(63);
    let u = ((x << k.u32(3)) | (x >> k.u32(35))) ^ !(x << s);
    k.store(
        out_u,
        i,
        u + x.count_ones() + x.bitcast(Scalar::I32).count_ones(),
    );
    let si = x.bitcast(Scalar::I32);
    k.store(out_i, i, (si >> s) & !(si << k.u32(1)) | (si ^ k.i32(-7)));
    k.finish()
}

/// A shared-memory tree reduction: private accumulation in a loop, barriers inside loops.
fn reduce_shared() -> Kernel {
    let k = KernelBuilder::new("reduce_shared", [128, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let sums = k.shared("sums", Scalar::F32, 128);
    let l = k.local_index();
    let acc = k.var("acc", Scalar::F32);
    let start = k.workgroup_id(0) * k.u32(128) + l;
    let stride = k.num_workgroups(0) * k.u32(128);
    k.for_range(start, n, 1, |j| {
        k.if_((j % stride).eq(start % stride), || {
            acc.set(acc.get() + k.load(x, j))
        });
    });
    k.store_shared(sums, l, acc.get());
    k.barrier();
    k.for_range(k.u32(0), k.u32(7), 1, |level| {
        let half = k.u32(64) >> level;
        k.if_(l.lt(half), || {
            let v = k.load_shared(sums, l) + k.load_shared(sums, l + half);
            k.store_shared(sums, l, v);
        });
        k.barrier();
    });
    k.if_(l.eq(k.u32(0)), || {
        k.store(out, k.workgroup_id(0), k.load_shared(sums, k.u32(0)))
    });
    k.finish()
}

/// Subgroup reductions and shuffles on each number type, and the subgroup builtins.
fn subgroups() -> Kernel {
    let k = KernelBuilder::new("subgroups", [64, 1, 1]);
    k.require_subgroups();
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let ids = k.buffer("ids", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    let v = k.load(x, i);
    let sum = v.subgroup_sum() + v.subgroup_min() + v.subgroup_max();
    let mut total = sum;
    for m in [1, 2, 4] {
        total = total + total.shuffle_xor(k.u32(m));
    }
    k.store(out, i, total);
    let lane = k.subgroup_invocation_id();
    let u = lane.subgroup_sum() + lane.subgroup_max() + lane.shuffle_xor(k.u32(1));
    let s = lane.cast(Scalar::I32).subgroup_min();
    k.store(
        ids,
        i,
        u + k.subgroup_size() * k.subgroup_id() + s.cast(Scalar::U32),
    );
    k.finish()
}

/// f16 subgroup operations (a separate kernel: they need shaderSubgroupExtendedTypes).
fn subgroups_f16() -> Kernel {
    let k = KernelBuilder::new("subgroups_f16", [32, 1, 1]);
    k.require_subgroups();
    let x = k.buffer("x", Scalar::F16, Access::ReadWrite);
    let i = k.global_id(0);
    let v = k.load(x, i);
    k.store(x, i, v.subgroup_sum() + v.shuffle_xor(k.u32(1)));
    k.finish()
}

const VALUE_TYPES: [Scalar; 5] = [
    Scalar::F32,
    Scalar::F16,
    Scalar::I32,
    Scalar::U32,
    Scalar::Bool,
];

/// Every unary and binary operation on every type it accepts, every cast and bitcast, select,
/// and non-finite literals; all results reach a store so nothing is dead.
fn every_op() -> Kernel {
    use BinaryOp::*;
    use UnaryOp::*;
    let k = KernelBuilder::new("every_op", [8, 4, 2]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let i = k.global_id(0) + k.global_id(1) * k.u32(3) + k.global_id(2) * k.u32(5);
    let seed = i + k.local_id(0) + k.local_id(1) + k.local_id(2) + k.local_index();
    let seed = seed + k.workgroup_id(1) + k.workgroup_id(2) + k.num_workgroups(1);
    let seed = seed + k.num_workgroups(2) + k.param("p", Scalar::U32);
    let acc = k.var("acc", Scalar::U32);
    // Fold any value into the u32 accumulator.
    let sink = |v: trine_ir::Val<'_>| acc.set(acc.get() ^ v.cast(Scalar::U32));

    let values = |ty: Scalar| match ty {
        Scalar::Bool => (seed.lt(k.u32(3)), seed.ge(k.u32(9))),
        _ => (seed.cast(ty), (seed + k.u32(1)).cast(ty)),
    };
    for ty in VALUE_TYPES {
        let (a, b) = values(ty);
        let float = matches!(ty, Scalar::F32 | Scalar::F16);
        let unary: &[UnaryOp] = match ty {
            Scalar::Bool => &[Not],
            Scalar::I32 => &[Neg, Not, Abs, CountOnes],
            Scalar::U32 => &[Not, CountOnes],
            _ => &[Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Floor],
        };
        for &op in unary {
            sink(k.emit(trine_ir::Expr::Unary { op, arg: a.id }));
        }
        let binary: &[BinaryOp] = match ty {
            Scalar::Bool => &[And, Or, Xor, Eq, Ne],
            _ if float => &[
                Add, Sub, Mul, Div, Rem, Min, Max, Pow, Eq, Ne, Lt, Le, Gt, Ge,
            ],
            _ => &[
                Add, Sub, Mul, Div, Rem, Min, Max, And, Or, Xor, Shl, Shr, Eq, Ne, Lt, Le, Gt, Ge,
            ],
        };
        for &op in binary {
            let rhs = if matches!(op, Shl | Shr) { seed } else { b };
            sink(k.emit(trine_ir::Expr::Binary {
                op,
                lhs: a.id,
                rhs: rhs.id,
            }));
        }
        if float {
            sink(a.fma(b, a));
        }
        sink(k.select(seed.lt(k.u32(5)), a, b));
        for to in VALUE_TYPES {
            sink(a.cast(to));
        }
    }
    for from in [Scalar::F32, Scalar::I32, Scalar::U32] {
        for to in [Scalar::F32, Scalar::I32, Scalar::U32] {
            sink(values(from).0.bitcast(to));
        }
    }
    for bits in [0x7f80_0000, 0xff80_0000, 0x7fc0_0001] {
        sink(k.lit(Literal::F32(bits)).max(k.f32(-0.0)));
    }
    for bits in [0x7c00, 0xfc00, 0x7e01, 0x0001, 0x8000] {
        sink(k.lit(Literal::F16(bits)).max(k.f16(65504.0)));
    }
    k.store(out, i, acc.get());
    k.finish()
}

fn kernels() -> Vec<Kernel> {
    vec![
        saxpy(),
        f16_mix(),
        quant_loads(),
        bit_ops(),
        reduce_shared(),
        subgroups(),
        subgroups_f16(),
        every_op(),
    ]
}

fn tools_required() -> bool {
    std::env::var("TRINE_REQUIRE_TOOLS")
        .is_ok_and(|v| v.split(',').any(|t| t.trim() == "spirv-val"))
}

/// Runs `spirv-val` on `words` for each target environment; `None` when the tool is absent.
fn spirv_val(name: &str, words: &[u32]) -> Option<Vec<String>> {
    Command::new("spirv-val").arg("--version").output().ok()?;
    let path =
        std::env::temp_dir().join(format!("trine-codegen-{}-{name}.spv", std::process::id()));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).expect("write the module to the temp dir");
    let failures = ["vulkan1.1", "vulkan1.3"]
        .into_iter()
        .filter_map(|env| {
            let r = Command::new("spirv-val")
                .args(["--target-env", env])
                .arg(&path)
                .output()
                .expect("spirv-val ran a moment ago");
            let err = String::from_utf8_lossy(&r.stderr);
            (!r.status.success()).then(|| format!("{name} ({env}): {err}"))
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    Some(failures)
}

#[test]
fn spirv_passes_naga_and_spirv_val() {
    let mut failures = vec![];
    let mut validated = true;
    for k in kernels() {
        let out = spirv(&k, &SpirvOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.words[0], 0x0723_0203, "{}: SPIR-V magic", k.name);
        assert_eq!(out.words[1], 0x0001_0300, "{}: SPIR-V 1.3", k.name);
        assert_eq!(out.entry_point, k.name);
        match spirv_val(&k.name, &out.words) {
            Some(f) => failures.extend(f),
            None => validated = false,
        }
        let debug = spirv(
            &k,
            &SpirvOptions {
                debug: true,
                ..SpirvOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            debug.words.len() > out.words.len(),
            "{}: debug adds names",
            k.name
        );
    }
    if !validated {
        assert!(
            !tools_required(),
            "spirv-val is required (TRINE_REQUIRE_TOOLS) but not on PATH"
        );
        println!("skipped spirv-val: not on PATH (Debian: apt-get install spirv-tools)");
    }
    assert!(
        failures.is_empty(),
        "spirv-val rejected:\n{}",
        failures.join("\n")
    );
}

/// Matrix tiles become cooperative-matrix operations, which bring the Vulkan memory model.
#[test]
fn tiles_are_cooperative_matrices() {
    let k = tiled_product();
    let out = spirv(&k, &SpirvOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.uses_tiles && out.uses_f16 && out.uses_subgroups);
    let without = spirv(&saxpy(), &SpirvOptions::default()).unwrap();
    assert!(!without.uses_tiles);
    // Debian 12's spirv-tools (2022.4) predates SPV_KHR_cooperative_matrix and rejects its
    // capability as unknown; a newer spirv-val checks the module. The NVIDIA driver runs it
    // (docs/bench/prefill.md).
    match spirv_val(&k.name, &out.words) {
        Some(f)
            if f.iter()
                .all(|e| e.contains("Invalid capability operand: 6022"))
                && !f.is_empty() =>
        {
            println!("spirv-val skipped the tiled module: this spirv-val predates SPV_KHR_cooperative_matrix")
        }
        Some(failures) => assert!(failures.is_empty(), "{}", failures.join("\n")),
        None => assert!(!tools_required(), "spirv-val is required but not on PATH"),
    }
}

#[test]
fn reports_what_the_device_must_enable() {
    let out = spirv(&saxpy(), &SpirvOptions::default()).unwrap();
    assert!(!out.uses_f16 && !out.uses_16bit_storage && !out.uses_subgroups);
    assert_eq!(out.push_constant_bytes, 4 * (5 + 2));

    let out = spirv(&f16_mix(), &SpirvOptions::default()).unwrap();
    assert!(out.uses_f16 && out.uses_16bit_storage && !out.uses_subgroups);
    assert_eq!(out.push_constant_bytes, 4 * 5);

    let out = spirv(&subgroups(), &SpirvOptions::default()).unwrap();
    assert!(!out.uses_f16 && out.uses_subgroups);

    let out = spirv(&quant_loads(), &SpirvOptions::default()).unwrap();
    assert!(
        !out.uses_f16 && !out.uses_16bit_storage,
        "packed types are read as u32 words"
    );

    // Packed dot products are byte products unless the device has them natively.
    let dot = {
        let k = KernelBuilder::new("dot", [1, 1, 1]);
        let out = k.buffer("out", Scalar::I32, Access::Write);
        k.store(
            out,
            k.u32(0),
            k.u32(0x0102_03ff).dot4_i8(k.u32(0x7f80_0102)),
        );
        k.finish()
    };
    let bytes = spirv(&dot, &SpirvOptions::default()).unwrap();
    assert!(!bytes.uses_integer_dot);
    let native = SpirvOptions {
        integer_dot_product: true,
        ..SpirvOptions::default()
    };
    assert!(spirv(&dot, &native).unwrap().uses_integer_dot);
}

#[test]
fn wgsl_is_written_from_the_same_module() {
    for k in kernels() {
        let text = wgsl(&k).unwrap_or_else(|e| panic!("{e}"));
        // naga's namer appends `_` to names that end in a digit.
        assert!(
            text.contains(&format!("fn {}", k.name)),
            "{}:\n{text}",
            k.name
        );
        assert!(text.contains("@compute"), "{}:\n{text}", k.name);
        assert!(text.contains("var<immediate>"), "{}:\n{text}", k.name);
    }
    let text = wgsl(&f16_mix()).unwrap();
    assert!(text.contains("enable f16;"), "{text}");
    assert!(text.contains("array<f16>"), "{text}");
}

#[test]
fn module_keeps_the_abi() {
    let module = naga_module::lower(&quant_loads()).unwrap().module;
    let buffers: Vec<_> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| {
            g.binding
                .map(|b| (b.group, b.binding, g.name.clone().unwrap()))
        })
        .collect();
    let want = [(0, 0, "q"), (0, 1, "s"), (0, 2, "w"), (0, 3, "out")];
    assert_eq!(buffers, want.map(|(g, b, n)| (g, b, n.to_string())));
    let ep = &module.entry_points[0];
    assert_eq!(
        (ep.name.as_str(), ep.workgroup_size),
        ("quant_loads", [64, 1, 1])
    );
}

#[test]
fn errors_are_typed() {
    let k = KernelBuilder::new("bad", [64, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Read);
    k.store(out, k.u32(0), k.u32(1));
    assert!(matches!(
        spirv(&k.finish(), &SpirvOptions::default()),
        Err(CodegenError::Invalid(_))
    ));

    // Valid IR that naga refuses: an integer division by a literal zero.
    let k = KernelBuilder::new("div_zero", [64, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    k.store(out, i, i / k.u32(0));
    match wgsl(&k.finish()) {
        Err(CodegenError::NagaValidation { kernel, message }) => {
            assert_eq!(kernel, "div_zero");
            assert!(message.contains("zero"), "{message}");
        }
        other => panic!("expected a naga validation error, got {other:?}"),
    }
}

#[test]
fn subgroup_ops_need_the_capability() {
    let k = KernelBuilder::new("sg", [64, 1, 1]);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let i = k.global_id(0);
    let v = i.cast(Scalar::F32).subgroup(SubgroupOp::Sum);
    k.store(out, i, v);
    assert!(matches!(wgsl(&k.finish()), Err(CodegenError::Invalid(_))));
}
