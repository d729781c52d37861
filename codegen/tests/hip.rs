//! The HIP/CUDA lowering: a spread of small kernels lowered for both dialects, checked for the
//! structure the backends and compilers rely on. Compiling the text needs hiprtc or NVRTC,
//! which only the backends load.

mod common;

use common::{quant_loads, saxpy};
use trine_codegen::{hip, CodegenError, Dialect};
use trine_ir::{
    Access, BinaryOp, Expr, Kernel, KernelBuilder, Literal, Scalar, Stmt, SubgroupOp, UnaryOp,
};

const DIALECTS: [Dialect; 2] = [Dialect::Hip, Dialect::Cuda];

/// f16 buffers, a private f16 accumulator, f16 shared memory, and casts both ways.
fn f16_mix() -> Kernel {
    let k = KernelBuilder::new("f16_mix", [32, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::Write);
    let z = k.buffer("z", Scalar::F32, Access::Write);
    let sh = k.shared("tile", Scalar::F16, 32);
    let i = k.global_id(0);
    let l = k.local_index();
    let acc = k.var("acc", Scalar::F16);
    let v = k.load(x, i);
    acc.set(acc.get() + v * k.f16(0.5));
    acc.set(acc.get().fma(v, k.f16(-1.25)));
    k.store_shared(sh, l, acc.get());
    k.barrier();
    let other = k.load_shared(sh, k.u32(31) - l);
    k.store(y, i, other.max(k.lit(Literal::F16(0x7c00))));
    let wide = other.cast(Scalar::F32) * k.f32(3.0);
    k.store(z, i, wide + k.f32(1.5).cast(Scalar::F16).cast(Scalar::F32));
    k.finish()
}

/// Integer bit operations, shifts, population count and bit casts.
fn bit_ops() -> Kernel {
    let k = KernelBuilder::new("bit_ops", [64, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let b = k.buffer("b", Scalar::I32, Access::Read);
    let f = k.buffer("f", Scalar::F32, Access::ReadWrite);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    let x = k.load(a, i);
    let y = k.load(b, i);
    let mixed = ((x << k.u32(35)) ^ (x >> y.bitcast(Scalar::U32))) | !x;
    let signed = (y << x) >> k.u32(3);
    let bits = k.load(f, i).bitcast(Scalar::U32);
    let back = (bits & k.u32(0x7fff_ffff)).bitcast(Scalar::F32);
    k.store(
        f,
        i,
        (signed.bitcast(Scalar::F32).bitcast(Scalar::I32)).cast(Scalar::F32) + back,
    );
    k.store(
        out,
        i,
        mixed + signed.bitcast(Scalar::U32).count_ones() + y.count_ones(),
    );
    k.finish()
}

/// Shared memory, barriers and a counted loop: a tree reduction per workgroup.
fn shared_loop() -> Kernel {
    let k = KernelBuilder::new("shared_loop", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let sh = k.shared("sums", Scalar::F32, 64);
    let l = k.local_index();
    let acc = k.var("acc", Scalar::F32);
    k.for_range(k.global_id(0), n, 64 * 7, |j| {
        acc.set(acc.get() + k.load(x, j))
    });
    k.store_shared(sh, l, acc.get());
    k.barrier();
    let mut stride = 32;
    while stride > 0 {
        let s = k.u32(stride);
        k.if_(l.lt(s), || {
            let sum = k.load_shared(sh, l) + k.load_shared(sh, l + s);
            k.store_shared(sh, l, sum);
        });
        k.barrier();
        stride /= 2;
    }
    k.if_else(
        l.eq(k.u32(0)),
        || k.store(out, k.workgroup_id(0), k.load_shared(sh, l)),
        || k.store_shared(sh, l, k.f32(0.0)),
    );
    k.finish()
}

/// Every subgroup operation on every type it takes, and the subgroup builtins.
fn subgroups() -> Kernel {
    let k = KernelBuilder::new("subgroups", [64, 1, 1]);
    k.require_subgroups();
    let xf = k.buffer("xf", Scalar::F32, Access::ReadWrite);
    let xh = k.buffer("xh", Scalar::F16, Access::ReadWrite);
    let xi = k.buffer("xi", Scalar::I32, Access::ReadWrite);
    let xu = k.buffer("xu", Scalar::U32, Access::ReadWrite);
    let i = k.global_id(0);
    let mask = k.u32(1);
    for buf in [xf, xh, xi, xu] {
        let v = k.load(buf, i);
        let r = v.subgroup_sum() + v.subgroup_min() + v.subgroup_max() + v.shuffle_xor(mask);
        k.store(buf, i, r);
    }
    let lanes = k.subgroup_size() * k.subgroup_id() + k.subgroup_invocation_id();
    k.store(xu, i, lanes);
    k.finish()
}

fn select_kernel() -> Kernel {
    let k = KernelBuilder::new("select_max", [128, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::ReadWrite);
    let i = k.global_id(0);
    let v = k.load(x, i);
    let c = v.gt(k.f32(0.0)) & v.lt(k.f32(10.0));
    k.store(x, i, k.select(c, v, k.f32(-0.0)));
    k.finish()
}

fn unary_ops(ty: Scalar) -> Vec<UnaryOp> {
    use UnaryOp::*;
    match ty {
        Scalar::F32 | Scalar::F16 => {
            vec![Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Floor]
        }
        Scalar::I32 => vec![Neg, Abs, Not, CountOnes],
        Scalar::U32 => vec![Not, CountOnes],
        _ => vec![Not],
    }
}

fn binary_ops(ty: Scalar) -> Vec<BinaryOp> {
    use BinaryOp::*;
    let cmp = [Eq, Ne, Lt, Le, Gt, Ge];
    let mut v = match ty {
        Scalar::F32 | Scalar::F16 => vec![Add, Sub, Mul, Div, Rem, Min, Max, Pow],
        _ => vec![Add, Sub, Mul, Div, Rem, Min, Max, And, Or, Xor, Shl, Shr],
    };
    v.extend(cmp);
    v
}

/// Every unary and binary operation on values of `ty` (a buffer type), each result stored at
/// its own index. Integer divisors are made odd, so never zero.
fn all_ops(ty: Scalar) -> Kernel {
    let k = KernelBuilder::new(&format!("ops_{}", ty.name()), [32, 1, 1]);
    let a = k.buffer("a", ty, Access::Read);
    let b = k.buffer("b", ty, Access::Read);
    let sh = k.buffer("sh", Scalar::U32, Access::Read);
    let out = k.buffer("out", ty, Access::Write);
    let flags = k.buffer("flags", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    let x = k.load(a, i);
    let mut y = k.load(b, i);
    if ty.is_int() {
        y = y | k.lit(Literal::U32(1)).cast(ty);
    }
    let ops = unary_ops(ty).len() + binary_ops(ty).len();
    let slot = |j: usize| i * k.u32(ops as u32) + k.u32(j as u32);
    for (j, op) in unary_ops(ty).into_iter().enumerate() {
        let r = k.emit(Expr::Unary { op, arg: x.id });
        let r = if op == UnaryOp::CountOnes {
            r.cast(ty)
        } else {
            r
        };
        k.store(out, slot(j), r);
    }
    let base = unary_ops(ty).len();
    for (j, op) in binary_ops(ty).into_iter().enumerate() {
        let rhs = if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
            k.load(sh, i)
        } else {
            y
        };
        let r = k.emit(Expr::Binary {
            op,
            lhs: x.id,
            rhs: rhs.id,
        });
        if op.is_comparison() {
            k.store(flags, slot(base + j), r.cast(Scalar::U32));
        } else {
            k.store(out, slot(base + j), r);
        }
    }
    k.finish()
}

/// Logic on booleans: every operation Bool takes.
fn bool_ops() -> Kernel {
    let k = KernelBuilder::new("ops_bool", [32, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    let x = k.load(a, i);
    let p = (x & k.u32(1)).ne(k.u32(0));
    let q = (x & k.u32(2)).eq(k.u32(2));
    let mut acc = k.u32(0);
    for (j, op) in [
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Eq,
        BinaryOp::Ne,
    ]
    .into_iter()
    .enumerate()
    {
        let r = k.emit(Expr::Binary {
            op,
            lhs: p.id,
            rhs: q.id,
        });
        acc = acc | (r.cast(Scalar::U32) << k.u32(j as u32));
    }
    acc = acc | ((!p).cast(Scalar::U32) << k.u32(5));
    k.store(
        out,
        i,
        k.select(k.bool(true) ^ k.bool(false), acc, k.u32(0)),
    );
    k.finish()
}

/// Every conversion between value types, from values that make each one defined.
fn casts() -> Kernel {
    let k = KernelBuilder::new("casts", [32, 1, 1]);
    let f = k.buffer("f", Scalar::F32, Access::Read);
    let h = k.buffer("h", Scalar::F16, Access::Read);
    let s = k.buffer("s", Scalar::I32, Access::Read);
    let u = k.buffer("u", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    let vals = [
        k.load(f, i).abs(),
        k.load(h, i).abs(),
        k.load(s, i),
        k.load(u, i),
        k.load(u, i).gt(k.u32(7)),
    ];
    let tys = [
        Scalar::F32,
        Scalar::F16,
        Scalar::I32,
        Scalar::U32,
        Scalar::Bool,
    ];
    let mut j = 0;
    for v in vals {
        for to in tys {
            let c = v.cast(to);
            let bits = match to {
                Scalar::F32 => c.bitcast(Scalar::U32),
                Scalar::F16 => c.cast(Scalar::F32).bitcast(Scalar::U32),
                _ => c.cast(Scalar::U32),
            };
            k.store(out, i * k.u32(25) + k.u32(j), bits);
            j += 1;
        }
    }
    k.finish()
}

/// Every builtin on every axis of a 3-D workgroup.
fn builtins_3d() -> Kernel {
    let k = KernelBuilder::new("builtins_3d", [4, 2, 3]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let (wg, n) = (|a| k.workgroup_id(a), |a| k.num_workgroups(a));
    let group = wg(0) + n(0) * (wg(1) + n(1) * wg(2));
    let flat = k.local_index() + group * k.u32(24);
    // Mixed so that a value on the wrong axis changes the result.
    let mut acc = k.u32(0);
    for a in 0..3 {
        for v in [k.global_id(a), k.local_id(a), wg(a), n(a)] {
            acc = acc * k.u32(131) + v;
        }
    }
    k.store(out, flat, acc);
    k.finish()
}

/// Literals whose decimal form would lose them.
fn literals() -> Kernel {
    let k = KernelBuilder::new("literals", [1, 1, 1]);
    let f = k.buffer("f", Scalar::F32, Access::Write);
    let h = k.buffer("h", Scalar::F16, Access::Write);
    let s = k.buffer("s", Scalar::I32, Access::Write);
    let u = k.buffer("u", Scalar::U32, Access::Write);
    let fs = [
        Literal::F32(0x7fc0_0001),
        Literal::F32(f32::INFINITY.to_bits()),
        Literal::F32(f32::NEG_INFINITY.to_bits()),
        Literal::F32(1),
        Literal::F32(0x8000_0000),
        Literal::f32(0.1),
        Literal::f32(-3.4028235e38),
        Literal::f32(1e-30),
    ];
    for (j, l) in fs.into_iter().enumerate() {
        k.store(f, k.u32(j as u32), k.lit(l));
    }
    for (j, b) in [0x7e01u16, 0xfc00, 0x0001, 0x3c00, 0x8000]
        .into_iter()
        .enumerate()
    {
        k.store(h, k.u32(j as u32), k.lit(Literal::F16(b)));
    }
    for (j, v) in [i32::MIN, i32::MAX, -1, 0].into_iter().enumerate() {
        k.store(s, k.u32(j as u32), k.i32(v));
    }
    k.store(u, k.u32(0), k.u32(u32::MAX));
    k.finish()
}

fn kernels() -> Vec<Kernel> {
    let mut v = vec![
        saxpy(),
        f16_mix(),
        quant_loads(),
        bit_ops(),
        shared_loop(),
        subgroups(),
        select_kernel(),
        bool_ops(),
        casts(),
        builtins_3d(),
        literals(),
    ];
    v.extend([Scalar::F32, Scalar::F16, Scalar::I32, Scalar::U32].map(all_ops));
    v
}

fn lower(k: &Kernel, d: Dialect) -> String {
    hip(k, d).unwrap_or_else(|e| panic!("{} ({d:?}): {e}", k.name))
}

/// The text before the kernel function, and the function itself.
fn split(text: &str) -> (&str, &str) {
    let at = text.find("extern \"C\"").expect("a kernel function");
    text.split_at(at)
}

/// Identifiers of the form `trine_...` in `text`.
fn helpers(text: &str) -> Vec<&str> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = vec![];
    let mut rest = text;
    while let Some(at) = rest.find("trine_") {
        let boundary = at == 0 || !rest[..at].ends_with(ident);
        let end = rest[at..]
            .find(|c: char| !ident(c))
            .map_or(rest.len(), |e| at + e);
        if boundary {
            out.push(&rest[at..end]);
        }
        rest = &rest[end..];
    }
    out
}

#[test]
fn saxpy_signature_and_body() {
    for d in DIALECTS {
        let text = lower(&saxpy(), d);
        let sig = "extern \"C\" __global__ void __launch_bounds__(64) saxpy(const float* \
                   __restrict__ b_x, float* __restrict__ b_y, float p_a, unsigned int p_n) {";
        assert!(text.contains(sig), "{d:?}:\n{text}");
        assert!(text.contains("(unsigned int)blockIdx.x * 64u + (unsigned int)threadIdx.x"));
        assert!(text.contains("fmaf("), "{text}");
        assert!(!text.contains("#include"), "no header without f16:\n{text}");
        let prelude = split(&text).0;
        let wait = d == Dialect::Cuda;
        assert_eq!(
            prelude.is_empty(),
            !wait,
            "no prelude but CUDA's wait:\n{text}"
        );
        assert_eq!(
            prelude.matches("__device__").count(),
            wait as usize,
            "{text}"
        );
    }
}

#[test]
fn every_kernel_lowers_deterministically_with_balanced_braces() {
    for k in kernels() {
        for d in DIALECTS {
            let text = lower(&k, d);
            assert_eq!(text, lower(&k, d));
            let open = text.matches('{').count();
            assert_eq!(open, text.matches('}').count(), "{}:\n{text}", k.name);
            assert_eq!(
                text.matches('(').count(),
                text.matches(')').count(),
                "{text}"
            );
            assert!(text.ends_with("}\n"));
        }
    }
}

/// Each `Let` becomes one `const` initialisation, and every `trine_*` helper the text calls is
/// defined in its prelude.
#[test]
fn every_expression_is_named_once_and_every_helper_is_defined() {
    for k in kernels() {
        for d in DIALECTS {
            let text = lower(&k, d);
            let (prelude, body) = split(&text);
            for id in 0..k.exprs.len() {
                let n = body.matches(&format!(" e{id} = ")).count();
                assert_eq!(n, 1, "{} e{id} ({d:?}):\n{text}", k.name);
            }
            for h in helpers(body).into_iter().chain(helpers(prelude)) {
                let defined = prelude.contains(&format!(" {h}("))
                    || prelude.contains(&format!("typedef _Float16 {h};"))
                    || prelude.contains(&format!("typedef __half {h};"));
                assert!(defined, "{} ({d:?}) uses {h} undefined:\n{text}", k.name);
            }
        }
    }
}

#[test]
fn f16_prelude_per_dialect() {
    let k = f16_mix();
    let hip_text = lower(&k, Dialect::Hip);
    assert!(!hip_text.contains("hip_fp16.h"), "{hip_text}");
    assert!(!hip_text.contains("#include"), "{hip_text}");
    assert!(hip_text.contains("typedef _Float16 trine_f16;"));
    let cuda = lower(&k, Dialect::Cuda);
    assert!(cuda.starts_with("#include <cuda_fp16.h>\n"), "{cuda}");
    assert!(cuda.contains("typedef __half trine_f16;"));
    assert!(cuda.contains("__float2half_rn"));
    for text in [&hip_text, &cuda] {
        let sig = "f16_mix(const trine_f16* __restrict__ b_x, trine_f16* __restrict__ b_y, \
                   float* __restrict__ b_z) {";
        assert!(text.contains(sig), "{text}");
        assert!(text.contains("__shared__ trine_f16 s_tile[32];"));
        assert!(text.contains("trine_f16 v_acc = trine_h_bits(0x0000);"));
        // f16 arithmetic computes in float and rounds after each operation.
        assert!(text.contains("trine_f2h(trine_h2f(e"), "{text}");
        assert!(text.contains("trine_f2h(fmaf(trine_h2f("), "{text}");
        assert!(text.contains("trine_f2h(fmaxf(trine_h2f("), "{text}");
        assert!(text.contains("trine_h_bits(0x7c00)"), "{text}");
    }
}

#[test]
fn storage_only_loads_widen() {
    for d in DIALECTS {
        let text = lower(&quant_loads(), d);
        assert!(
            text.contains("const unsigned char* __restrict__ b_q"),
            "{text}"
        );
        assert!(
            text.contains("const signed char* __restrict__ b_s"),
            "{text}"
        );
        assert!(
            text.contains("const unsigned short* __restrict__ b_w"),
            "{text}"
        );
        assert!(text.contains("= (unsigned int)b_q[e"), "{text}");
        assert!(text.contains("= (int)b_s[e"), "{text}");
        assert!(
            text.contains("= __uint_as_float((unsigned int)b_w[e"),
            "{text}"
        );
        assert!(text.contains("] << 16);"), "{text}");
    }
}

#[test]
fn integer_ops_are_defined_for_every_input() {
    let text = lower(&bit_ops(), Dialect::Hip);
    let shifts = text.matches(" << (").count() + text.matches(" >> (").count();
    assert_eq!(shifts, 4, "{text}");
    assert_eq!(
        text.matches(" & 31u)").count(),
        4,
        "shift amounts are masked:\n{text}"
    );
    assert!(
        text.contains("(int)((unsigned int)e"),
        "signed shl through unsigned:\n{text}"
    );
    for f in [
        "__float_as_uint(",
        "__uint_as_float(",
        "__float_as_int(",
        "__popc(",
    ] {
        assert!(text.contains(f), "{f}:\n{text}");
    }
    let ops = lower(&all_ops(Scalar::I32), Dialect::Hip);
    for want in [
        "= (int)((unsigned int)e1 + (unsigned int)e5);",
        "= (int)((unsigned int)e1 * (unsigned int)e5);",
        "= e5 == -1 ? (int)(0u - (unsigned int)e1) : e1 / e5;",
        "= e5 == -1 ? 0 : e1 % e5;",
        "= (int)(0u - (unsigned int)e1);",
        "= e1 < 0 ? (int)(0u - (unsigned int)e1) : e1;",
        "= ~e1;",
    ] {
        assert!(ops.contains(want), "{want}:\n{ops}");
    }
    let ops = lower(&all_ops(Scalar::U32), Dialect::Cuda);
    assert!(ops.contains("= e1 / e5;"), "{ops}");
    assert!(ops.contains("= e1 < e5 ? e1 : e5;"), "{ops}");
}

#[test]
fn float_ops_use_c_math() {
    for ty in [Scalar::F32, Scalar::F16] {
        let text = lower(&all_ops(ty), Dialect::Cuda);
        for f in [
            "fabsf", "expf", "logf", "sqrtf", "rsqrtf", "sinf", "cosf", "tanhf", "floorf", "fmodf",
            "fminf", "fmaxf", "powf",
        ] {
            assert!(text.contains(&format!("{f}(")), "{f} for {ty}:\n{text}");
        }
    }
    let text = lower(&all_ops(Scalar::F32), Dialect::Hip);
    assert!(
        text.contains("const bool e") && text.contains(" != e"),
        "{text}"
    );
    let text = lower(&all_ops(Scalar::F16), Dialect::Hip);
    assert!(
        text.contains("trine_h2f(e1) < trine_h2f(e2);"),
        "compare in float:\n{text}"
    );
}

#[test]
fn bool_logic_and_select() {
    let text = lower(&bool_ops(), Dialect::Hip);
    for want in [" && ", " || ", "= !e", "= true;", "= false;", " ? 1u : 0u;"] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    let text = lower(&select_kernel(), Dialect::Cuda);
    assert!(text.contains("= -0.0f;"), "{text}");
    assert!(text.contains(" ? e"), "{text}");
}

#[test]
fn casts_follow_the_ir() {
    let text = lower(&casts(), Dialect::Hip);
    for want in [
        "= trine_f2h(e",
        "= trine_h2f(e",
        "= (int)e",
        "= (unsigned int)e",
        "= (float)e",
        "= trine_f2h((float)e",
        "= (int)trine_h2f(e",
        " != 0.0f;",
        "trine_h2f(e",
        " != 0;",
        " ? 1.0f : 0.0f;",
        "= trine_f2h(e",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}

#[test]
fn shared_memory_barriers_and_loops() {
    let k = shared_loop();
    for d in DIALECTS {
        let text = lower(&k, d);
        assert!(
            text.contains("\n    __shared__ float s_sums[64];\n"),
            "{text}"
        );
        assert!(text.contains("\n    float v_acc = 0.0f;\n"), "{text}");
        assert!(text.contains("\n    unsigned int v_i1 = 0u;\n"), "{text}");
        assert_eq!(text.matches("__syncthreads();").count(), 7, "{text}");
        let Some(Stmt::Loop { start, end, .. }) =
            k.body.iter().find(|s| matches!(s, Stmt::Loop { .. }))
        else {
            panic!("a loop")
        };
        let head = format!(
            "for (v_i1 = e{}; v_i1 < e{}; v_i1 += 448u) {{",
            start.0, end.0
        );
        assert!(text.contains(&head), "{head}:\n{text}");
        assert!(text.contains("} else {"), "{text}");
    }
}

#[test]
fn subgroup_helpers_per_dialect() {
    let k = subgroups();
    let hip_text = lower(&k, Dialect::Hip);
    let cuda = lower(&k, Dialect::Cuda);
    assert!(hip_text.contains("__shfl_xor(v, (int)m)"), "{hip_text}");
    assert!(!hip_text.contains("_sync"), "{hip_text}");
    assert!(
        cuda.contains("__shfl_xor_sync(0xffffffffu, v, (int)m)"),
        "{cuda}"
    );
    for text in [&hip_text, &cuda] {
        for ty in ["f32", "f16", "i32", "u32"] {
            for op in ["sg_sum", "sg_min", "sg_max", "shfl_xor"] {
                assert!(
                    text.contains(&format!("trine_{op}_{ty}(e")),
                    "{op} {ty}:\n{text}"
                );
            }
        }
        assert!(
            text.contains("m = trine_warp_size() / 2u; m > 0u; m >>= 1"),
            "{text}"
        );
        // The butterfly combines with the IR's own arithmetic: f16 rounds, i32 wraps.
        assert!(
            text.contains("v = trine_f2h(trine_h2f(v) + trine_h2f(o));"),
            "{text}"
        );
        assert!(
            text.contains("v = (int)((unsigned int)v + (unsigned int)o);"),
            "{text}"
        );
        assert!(
            text.contains("(unsigned int)threadIdx.x % trine_warp_size()"),
            "{text}"
        );
        assert!(
            text.contains("(unsigned int)threadIdx.x / trine_warp_size()"),
            "{text}"
        );
    }
    // NVIDIA's warps are 32 wide, so CUDA's width is a constant NVRTC folds; HIP's depends on
    // the arch and stays hiprtc's `warpSize`.
    assert!(
        cuda.contains("unsigned int trine_warp_size() { return 32u; }"),
        "{cuda}"
    );
    assert!(
        hip_text.contains("unsigned int trine_warp_size() { return (unsigned int)warpSize; }"),
        "{hip_text}"
    );
    let no_f16 = lower(&shared_loop(), Dialect::Cuda);
    let helpers = no_f16.matches("trine_").count();
    assert!(
        no_f16.contains("    trine_wait_prior_grid();\n") && helpers == 2,
        "no helpers but the prior grid's wait without subgroups or f16:\n{no_f16}"
    );
}

#[test]
fn builtins_on_every_axis() {
    let text = lower(&builtins_3d(), Dialect::Hip);
    for want in [
        "(unsigned int)threadIdx.x + (unsigned int)threadIdx.y * 4u + \
         (unsigned int)threadIdx.z * 8u;",
        "(unsigned int)blockIdx.y * 2u + (unsigned int)threadIdx.y;",
        "(unsigned int)blockIdx.z * 3u + (unsigned int)threadIdx.z;",
        "= (unsigned int)gridDim.z;",
        "= (unsigned int)blockIdx.y;",
        "= (unsigned int)threadIdx.z;",
        "__launch_bounds__(24)",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}

#[test]
fn literals_are_exact() {
    let text = lower(&literals(), Dialect::Cuda);
    for want in [
        "= __uint_as_float(0x7fc00001u);",
        "= __uint_as_float(0x7f800000u);",
        "= __uint_as_float(0xff800000u);",
        "= __uint_as_float(0x00000001u);",
        "= -0.0f;",
        "= 0.1f;",
        "= -3.4028235e38f;",
        "= 1e-30f;",
        "= trine_h_bits(0x7e01);",
        "= trine_h_bits(0x0001);",
        "= (-2147483647 - 1);",
        "= 2147483647;",
        "= -1;",
        "= 4294967295u;",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}

#[test]
fn invalid_kernels_and_names_are_errors() {
    let k = KernelBuilder::new("bad", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let v = k.load(x, k.global_id(0));
    let _ = v.subgroup(SubgroupOp::Sum);
    let k = k.finish();
    assert!(matches!(
        hip(&k, Dialect::Hip),
        Err(CodegenError::Invalid(_))
    ));

    for name in [
        "float",
        "main",
        "threadIdx",
        "__foo",
        "_Bar",
        "trine_h2f",
        "expf",
    ] {
        let mut k = saxpy();
        k.name = name.to_string();
        for d in DIALECTS {
            assert!(
                matches!(hip(&k, d), Err(CodegenError::Write { .. })),
                "{name}"
            );
        }
    }
    // Declaration names are prefixed, so C keywords are fine there.
    let k = KernelBuilder::new("keywords", [1, 1, 1]);
    let b = k.buffer("int", Scalar::F32, Access::Write);
    let p = k.param("float", Scalar::F32);
    let v = k.var("for", Scalar::F32);
    v.set(p);
    k.store(b, k.u32(0), v.get());
    let text = lower(&k.finish(), Dialect::Hip);
    assert!(
        text.contains("float* __restrict__ b_int, float p_float"),
        "{text}"
    );
}

/// A CUDA kernel waits for the grid before it first thing, so the backend may launch it while
/// that grid finishes; HIP has no such launches.
#[test]
fn cuda_kernels_wait_for_the_prior_grid_first() {
    let cuda = lower(&shared_loop(), Dialect::Cuda);
    // Declarations, then the wait before the body's first statement.
    let body = cuda.split_once("p_n) {\n").map(|(_, b)| b).unwrap_or("");
    let first = body.lines().position(|l| l.contains(" = p_n;")).unwrap();
    let wait = body
        .lines()
        .position(|l| l == "    trine_wait_prior_grid();");
    assert_eq!(wait, Some(first - 1), "{cuda}");
    assert!(cuda.contains("griddepcontrol.wait"), "{cuda}");
    assert!(!lower(&shared_loop(), Dialect::Hip).contains("prior_grid"));
}

/// A CUDA kernel's leading prefetches come before its wait for the grid before it, so they run
/// while that grid finishes, as `prefetch.L2`; HIP defines the helper empty.
#[test]
fn cuda_prefetches_before_the_wait() {
    let k = KernelBuilder::new("pf", [64, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    k.for_range(k.local_index(), n, 64, |i| k.prefetch(w, i * k.u32(32)));
    let i = k.global_id(0);
    k.store(y, i, k.load(w, i));
    let k = k.finish();
    let cuda = lower(&k, Dialect::Cuda);
    let at = |what: &str| cuda.find(what).unwrap_or_else(|| panic!("{what}:\n{cuda}"));
    assert!(at("        trine_prefetch(&b_w[") < at("    trine_wait_prior_grid();\n"));
    assert!(at("    trine_wait_prior_grid();\n") < at("= b_w["));
    assert!(
        cuda.contains("asm volatile(\"prefetch.L2 [%0];\" :: \"l\"(p));"),
        "{cuda}"
    );
    let hip_text = lower(&k, Dialect::Hip);
    assert!(
        hip_text.contains("void trine_prefetch(const void*) {}")
            && hip_text.contains("trine_prefetch(&b_w["),
        "{hip_text}"
    );
}

/// Matrix tiles: `mma.sync` fragments in CUDA, RDNA3's WMMA in HIP (its subgroups of 32);
/// C refuses them with a typed error (the CPU runs scalar variants).
#[test]
fn tiles_lower_to_mma_in_cuda_and_wmma_in_hip() {
    let k = common::tiled_product();
    let text = lower(&k, Dialect::Cuda);
    assert!(text.contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
    assert!(text.contains("trine_tile_a t_ta;") && text.contains("trine_tile_acc t_acc;"));
    assert!(text.contains("trine_tile_load(t_tb, b_bt, "));
    let hip_text = lower(&k, Dialect::Hip);
    assert!(hip_text.contains("__builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a.v, b.v, c.v)"));
    assert!(hip_text.contains("trine_tile_a t_ta;") && hip_text.contains("trine_tile_acc t_acc;"));
    assert!(hip_text.contains("trine_tile_load_shared(t_ta, s_a_sh, "));
    assert!(!hip_text.contains("mma.sync") && !text.contains("wmma"));
    let e = trine_codegen::c(&k, &trine_codegen::COptions::new(8)).unwrap_err();
    assert!(
        matches!(
            e,
            CodegenError::Unsupported {
                what: "matrix tiles",
                ..
            }
        ),
        "{e}"
    );
    // Wave64's WMMA lays its operands out otherwise.
    let mut wide = common::tiled_product();
    wide.capabilities.subgroup_width = Some(64);
    let e = hip(&wide, Dialect::Hip).unwrap_err();
    assert!(
        matches!(
            e,
            CodegenError::Unsupported {
                what: "matrix tiles outside subgroups of 32",
                ..
            }
        ),
        "{e}"
    );
}

/// Warpgroup products: `wgmma` in CUDA, with shared arrays aligned to whole swizzle atoms and
/// a proxy fence before each barrier; HIP, SPIR-V and C refuse them with a typed error (their
/// devices run the subgroup tiles).
#[test]
fn groups_lower_to_wgmma_in_cuda_only() {
    let k = group_product();
    let text = lower(&k, Dialect::Cuda);
    assert!(text.contains("wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16"));
    assert!(text.contains("float g_acc[12];"));
    assert!(text.contains("trine_group_mma_n24(g_acc, &s_a_sh["));
    assert!(text.contains("trine_group_wait<0>();"));
    assert!(text.contains("__shared__ __align__(1024) trine_f16 s_a_sh["));
    let barrier =
        "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\"); __syncthreads();";
    assert_eq!(
        text.matches("__syncthreads();").count(),
        text.matches(barrier).count()
    );
    assert!(text.contains(barrier));
    // A product kernel only waits for the grid ahead: it does not let the next one start.
    assert!(!text.contains("launch_dependents"));
    let refused = |e: CodegenError| {
        matches!(
            e,
            CodegenError::Unsupported {
                what: "warpgroup products",
                ..
            }
        )
    };
    assert!(refused(hip(&k, Dialect::Hip).unwrap_err()));
    let spirv = trine_codegen::spirv(&k, &trine_codegen::SpirvOptions::default());
    assert!(refused(spirv.unwrap_err()));
    assert!(refused(trine_codegen::wgsl(&k).unwrap_err()));
    let options = trine_codegen::COptions::new(32);
    assert!(refused(trine_codegen::c(&k, &options).unwrap_err()));
}

/// A warpgroup product: each warpgroup of two multiplies its 64 rows of a staged A by a 24-row
/// B, both in shared memory, and stores its accumulator to a buffer.
fn group_product() -> trine_ir::Kernel {
    use trine_ir::{Access, KernelBuilder, Scalar, TileMemory, GROUP_ATOM, GROUP_K, GROUP_ROWS};
    let k = KernelBuilder::new("group_product", [256, 1, 1]);
    k.require_subgroup_width(32);
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let b = k.buffer("b", Scalar::F16, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let a_sh = k.shared("a_sh", Scalar::F16, 2 * GROUP_ROWS * GROUP_K);
    let b_sh = k.shared("b_sh", Scalar::F16, 3 * GROUP_ATOM);
    let lid = k.local_index();
    k.for_range(lid, k.u32(2 * GROUP_ROWS * GROUP_K), 256, |i| {
        k.store_shared(a_sh, i, k.load(a, i))
    });
    k.for_range(lid, k.u32(3 * GROUP_ATOM), 256, |i| {
        k.store_shared(b_sh, i, k.load(b, i))
    });
    k.barrier();
    let acc = k.group_acc("acc", 24);
    let group = lid / k.u32(128);
    acc.zero();
    acc.mma(
        (a_sh, group * k.u32(GROUP_ROWS * GROUP_K)),
        (b_sh, k.u32(0)),
    );
    k.group_wait(0);
    acc.store(
        TileMemory::Buffer(c),
        group * k.u32(GROUP_ROWS * 24),
        k.u32(24),
    );
    k.finish()
}

/// Workgroups asked resident reach CUDA's `__launch_bounds__` as its minimum; HIP, whose
/// second bound counts waves per SIMD, is left the invocations alone.
#[test]
fn min_resident_bounds_cuda_only() {
    let k = KernelBuilder::new("resident", [256, 1, 1]);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    k.store(y, k.global_id(0), k.u32(1));
    k.min_resident(2);
    let k = k.finish();
    let cuda = hip(&k, Dialect::Cuda).unwrap();
    assert!(
        cuda.contains("__launch_bounds__(256, 2) resident("),
        "{cuda}"
    );
    let amd = hip(&k, Dialect::Hip).unwrap();
    assert!(amd.contains("__launch_bounds__(256) resident("), "{amd}");
}
