//! The validator names what is wrong.

use trine_ir::{validate, Access, Expr, KernelBuilder, Limits, Scalar, Stmt, ValidationError};

#[test]
fn type_mismatch_names_the_expression() {
    let k = KernelBuilder::new("bad", [1, 1, 1]);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let sum = k.f32(1.0) + k.u32(2);
    k.store(out, k.u32(0), sum);
    let sum = sum.id;
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(
        matches!(&err, ValidationError::TypeMismatch { expr, .. } if *expr == sum),
        "{err}"
    );
}

/// An overlay lies in an earlier array, no overlay itself, of at least its bytes.
#[test]
fn an_overlay_needs_an_earlier_array_of_its_bytes() {
    let build = |len: u32, chained: bool| {
        let k = KernelBuilder::new("overlay", [1, 1, 1]);
        let out = k.buffer("out", Scalar::U32, Access::Write);
        let base = k.shared("base", Scalar::F16, 8);
        let words = k.shared_over("words", Scalar::U32, len, base);
        let on = if chained {
            k.shared_over("chained", Scalar::U32, 1, words)
        } else {
            words
        };
        k.store_shared(on, k.u32(0), k.u32(1));
        k.barrier();
        k.store(out, k.u32(0), k.load_shared(on, k.u32(0)));
        k.finish()
    };
    validate(&build(4, false), &Limits::default()).unwrap();
    for (len, chained, name, over) in [
        (5, false, "words", "\"base\""),
        (4, true, "chained", "\"words\""),
    ] {
        let err = validate(&build(len, chained), &Limits::default()).unwrap_err();
        assert!(
            matches!(&err, ValidationError::BadOverlay { name: n, over: o } if n == name && o == over),
            "{err}"
        );
    }
}

/// A kernel asks for one workgroup resident at least, or says nothing.
#[test]
fn a_kernel_asks_for_some_workgroups_resident() {
    let build = |n: u32| {
        let k = KernelBuilder::new("resident", [1, 1, 1]);
        let out = k.buffer("out", Scalar::U32, Access::Write);
        k.store(out, k.u32(0), k.u32(1));
        k.min_resident(n);
        k.finish()
    };
    validate(&build(2), &Limits::default()).unwrap();
    let err = validate(&build(0), &Limits::default()).unwrap_err();
    assert!(matches!(err, ValidationError::NoneResident), "{err}");
}

/// Pairs of halves go only into f16 arrays.
#[test]
fn shared_pairs_need_an_f16_array() {
    let k = KernelBuilder::new("pairs", [1, 1, 1]);
    let sh = k.shared("s", Scalar::U32, 2);
    k.store_shared_pair(sh, k.u32(0), k.u32(7));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(
        matches!(&err, ValidationError::PairArray { name, elem: Scalar::U32 } if name == "s"),
        "{err}"
    );
}

#[test]
fn shared_memory_over_the_limit() {
    let k = KernelBuilder::new("big", [1, 1, 1]);
    k.shared("s", Scalar::F32, 9000);
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert_eq!(
        err,
        ValidationError::SharedMemory {
            bytes: 36000,
            limit: 32768
        }
    );
}

#[test]
fn subgroup_use_needs_the_capability() {
    let k = KernelBuilder::new("sg", [32, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    k.store(out, k.u32(0), k.local_index().subgroup_sum());
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(
        matches!(err, ValidationError::CapabilityNotDeclared { .. }),
        "{err}"
    );
}

#[test]
fn unknown_variable_and_out_of_scope_expression() {
    let k = KernelBuilder::new("scope", [1, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let inner = std::cell::Cell::new(None);
    k.if_(k.bool(true), || inner.set(Some(k.u32(5).id)));
    let mut kernel = k.finish();
    let inner = inner.get().unwrap();
    let zero = kernel.exprs.len() as u32;
    kernel.exprs.push(Expr::Literal(trine_ir::Literal::U32(0)));
    kernel.body.push(Stmt::Let(trine_ir::ExprId(zero)));
    kernel.body.push(Stmt::Store {
        buffer: out,
        index: trine_ir::ExprId(zero),
        value: inner,
    });
    let err = validate(&kernel, &Limits::default()).unwrap_err();
    assert_eq!(err, ValidationError::NotInScope { expr: inner });

    let k = KernelBuilder::new("novar", [1, 1, 1]);
    let mut kernel = k.finish();
    kernel.exprs.push(Expr::Var(trine_ir::VarId(3)));
    kernel.body.push(Stmt::Let(trine_ir::ExprId(0)));
    let err = validate(&kernel, &Limits::default()).unwrap_err();
    assert_eq!(
        err,
        ValidationError::UnknownDecl {
            what: "variable",
            index: 3
        }
    );
}

#[test]
fn storing_to_read_only_or_storage_only_buffers_is_rejected() {
    let k = KernelBuilder::new("ro", [1, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    k.store(x, k.u32(0), k.f32(1.0));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(matches!(err, ValidationError::BufferAccess { .. }), "{err}");

    let k = KernelBuilder::new("so", [1, 1, 1]);
    let b = k.buffer("b", Scalar::U8, Access::ReadWrite);
    k.store(b, k.u32(0), k.u32(1));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(
        matches!(err, ValidationError::StorageOnlyStore { .. }),
        "{err}"
    );
}

#[test]
fn hash_changes_with_any_field() {
    let build = |wg: u32, lit: f32| {
        let k = KernelBuilder::new("h", [wg, 1, 1]);
        let out = k.buffer("out", Scalar::F32, Access::Write);
        k.store(out, k.local_index(), k.f32(lit));
        k.finish()
    };
    let base = trine_ir::kernel_hash(&build(4, 1.0));
    assert_eq!(base, trine_ir::kernel_hash(&build(4, 1.0)));
    assert_ne!(base, trine_ir::kernel_hash(&build(8, 1.0)));
    assert_ne!(base, trine_ir::kernel_hash(&build(4, 1.5)));
}

/// A packed dot product takes two `U32` words and gives `I32` (signed) or `U32` (unsigned).
#[test]
fn dot4_takes_packed_words() {
    let k = KernelBuilder::new("d", [1, 1, 1]);
    let out = k.buffer("out", Scalar::I32, Access::Write);
    k.store(out, k.u32(0), k.u32(7).dot4_i8(k.u32(9)));
    assert!(validate(&k.finish(), &Limits::default()).is_ok());

    let k = KernelBuilder::new("d", [1, 1, 1]);
    let out = k.buffer("out", Scalar::I32, Access::Write);
    let bad = k.i32(7).dot4_i8(k.u32(9));
    k.store(out, k.u32(0), bad);
    let bad = bad.id;
    assert!(matches!(
        validate(&k.finish(), &Limits::default()).unwrap_err(),
        ValidationError::TypeMismatch { expr, .. } if expr == bad
    ));

    let k = KernelBuilder::new("d", [1, 1, 1]);
    let out = k.buffer("out", Scalar::I32, Access::Write);
    k.store(out, k.u32(0), k.u32(7).dot4_u8(k.u32(9)));
    assert!(matches!(
        validate(&k.finish(), &Limits::default()).unwrap_err(),
        ValidationError::TypeMismatch { .. }
    ));
}

#[test]
fn prefetch_needs_a_readable_buffer_and_a_u32_index() {
    let k = KernelBuilder::new("pf_write_only", [1, 1, 1]);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    k.prefetch(out, k.u32(0));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(
        matches!(&err, ValidationError::BufferAccess { name, .. } if name == "out"),
        "{err}"
    );

    let k = KernelBuilder::new("pf_index", [1, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    k.prefetch(w, k.f32(0.0));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert!(matches!(err, ValidationError::TypeMismatch { .. }), "{err}");
}

#[test]
fn prefetch_prologue_is_the_leading_memory_free_statements_with_a_prefetch() {
    // Prefetches inside a loop, with the indices they need, then a load: three statements
    // (the loop start, the loop, the bound of each line) lead.
    let k = KernelBuilder::new("pf", [4, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    k.for_range(k.local_index(), n, 4, |i| k.prefetch(w, i * k.u32(32)));
    let v = k.load(x, k.local_index());
    k.store(y, k.local_index(), v);
    let kernel = k.finish();
    let first_load = kernel
        .body
        .iter()
        .position(|s| matches!(s, Stmt::Let(e) if matches!(kernel.expr(*e), Expr::Load { .. })))
        .unwrap();
    assert_eq!(kernel.prefetch_prologue(), first_load);
    assert!(first_load >= 3);

    // The same kernel without the prefetch has nothing to run early.
    let k = KernelBuilder::new("no_pf", [4, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let i = k.local_index() * k.u32(2);
    k.store(y, i, k.load(x, i));
    assert_eq!(k.finish().prefetch_prologue(), 0);

    // A prefetch whose index needs a load is not early, nor anything after it.
    let k = KernelBuilder::new("pf_late", [4, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let at = k.load(w, k.u32(0));
    k.prefetch(w, at);
    assert_eq!(k.finish().prefetch_prologue(), 0);

    // Unless the load is of a settled buffer: then the load, the prefetch and its index lead,
    // and the load of the unsettled buffer after them does not.
    let k = KernelBuilder::new("pf_settled", [4, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let step = k.buffer("step", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    k.settled(step);
    let at = k.load(step, k.u32(0));
    k.prefetch(w, at + k.local_index());
    k.store(y, k.local_index(), k.load(w, at));
    let kernel = k.finish();
    assert_eq!(validate(&kernel, &Limits::default()).map(drop), Ok(()));
    let loads: Vec<usize> = (kernel.body.iter().enumerate())
        .filter(|(_, s)| matches!(s, Stmt::Let(e) if matches!(kernel.expr(*e), Expr::Load { .. })))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(loads.len(), 2);
    assert_eq!(kernel.prefetch_prologue(), loads[1]);
}

#[test]
fn a_settled_buffer_is_read_only() {
    let k = KernelBuilder::new("settled_write", [4, 1, 1]);
    let y = k.buffer("y", Scalar::U32, Access::ReadWrite);
    k.settled(y);
    k.store(y, k.local_index(), k.u32(1));
    let err = validate(&k.finish(), &Limits::default()).unwrap_err();
    assert_eq!(
        err,
        ValidationError::SettledWritable { name: "y".into() },
        "{err}"
    );
}

#[test]
fn copies_need_one_element_type_and_a_read_only_source() {
    let build = |src_ty: Scalar, access: Access| {
        let k = KernelBuilder::new("copy", [4, 1, 1]);
        let src = k.buffer("src", src_ty, access);
        let sh = k.shared("s", Scalar::F16, 32);
        k.copy_async(src, k.u32(0), sh, k.u32(0));
        k.copy_commit();
        k.copy_wait(0);
        k.finish()
    };
    let limits = Limits::default();
    assert!(validate(&build(Scalar::F16, Access::Read), &limits).is_ok());
    assert!(matches!(
        validate(&build(Scalar::F32, Access::Read), &limits),
        Err(ValidationError::CopyTypes { .. })
    ));
    assert!(matches!(
        validate(&build(Scalar::F16, Access::ReadWrite), &limits),
        Err(ValidationError::BufferAccess { .. })
    ));
}
