//! The human-readable form of a kernel: used in errors, snapshots and `cargo xtask emit`, and
//! hashed to key every cache (it names every field of the kernel, so equal text means equal
//! kernels).

use crate::kernel::*;
use std::fmt::Write;

/// Prints `kernel` as text.
pub fn print(kernel: &Kernel) -> String {
    let mut out = String::new();
    let k = kernel;
    let [x, y, z] = k.workgroup_size;
    let _ = writeln!(out, "kernel {} workgroup({x}, {y}, {z})", k.name);
    if k.capabilities.subgroup {
        out.push_str("  requires subgroup\n");
    }
    if k.capabilities.tiles {
        out.push_str("  requires tiles\n");
    }
    if k.capabilities.async_copy {
        out.push_str("  requires async_copy\n");
    }
    if k.capabilities.group_mma {
        out.push_str("  requires group_mma\n");
    }
    if let Some(w) = k.capabilities.subgroup_width {
        let _ = writeln!(out, "  requires subgroup width {w}");
    }
    if let Some(n) = k.min_resident {
        let _ = writeln!(out, "  {n} workgroups resident at least");
    }
    for (i, b) in k.buffers.iter().enumerate() {
        let _ = writeln!(
            out,
            "  buffer {i} {}: {} {}",
            b.name,
            b.access.name(),
            b.elem
        );
    }
    for (i, p) in k.params.iter().enumerate() {
        let _ = writeln!(out, "  param {i} {}: {}", p.name, p.ty);
    }
    for (i, s) in k.shared.iter().enumerate() {
        let over = s.over.map_or(String::new(), |o| format!(" over {}", o.0));
        let _ = writeln!(
            out,
            "  shared {i} {}: [{}; {}]{over}",
            s.name, s.elem, s.len
        );
    }
    for (i, v) in k.vars.iter().enumerate() {
        let _ = writeln!(out, "  var {i} {}: {}", v.name, v.ty);
    }
    for (i, t) in k.tiles.iter().enumerate() {
        let _ = writeln!(out, "  tile {i} {}: {}", t.name, t.role.name());
    }
    for (i, g) in k.group_accs.iter().enumerate() {
        let _ = writeln!(out, "  group_acc {i} {}: 64x{}", g.name, g.cols);
    }
    out.push_str("{\n");
    block(k, &k.body, 1, &mut out);
    out.push_str("}\n");
    out
}

/// FNV-1a of the printed kernel: stable across runs, builds and Rust versions, so it can key
/// on-disk caches.
pub fn kernel_hash(kernel: &Kernel) -> u64 {
    print(kernel)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

fn e(id: ExprId) -> String {
    format!("%{}", id.0)
}

fn block(k: &Kernel, b: &Block, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for s in b {
        match s {
            Stmt::Let(id) => {
                let _ = writeln!(out, "{pad}{} = {}", e(*id), expr(k, k.expr(*id)));
            }
            Stmt::Assign { var, value } => {
                let _ = writeln!(out, "{pad}{} = {}", var_name(k, *var), e(*value));
            }
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let name = k.buffers.get(buffer.0 as usize).map_or("?", |b| &b.name);
                let _ = writeln!(out, "{pad}{name}[{}] = {}", e(*index), e(*value));
            }
            Stmt::Prefetch { buffer, index } => {
                let name = k.buffers.get(buffer.0 as usize).map_or("?", |b| &b.name);
                let _ = writeln!(out, "{pad}prefetch {name}[{}]", e(*index));
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                let name = k.shared.get(array.0 as usize).map_or("?", |s| &s.name);
                let _ = writeln!(out, "{pad}{name}[{}] = {}", e(*index), e(*value));
            }
            Stmt::StoreSharedPair {
                array,
                index,
                value,
            } => {
                let name = k.shared.get(array.0 as usize).map_or("?", |s| &s.name);
                let _ = writeln!(out, "{pad}{name}[{}..+2] = halves {}", e(*index), e(*value));
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                let _ = writeln!(out, "{pad}if {} {{", e(*cond));
                block(k, then, depth + 1, out);
                if !otherwise.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    block(k, otherwise, depth + 1, out);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Loop {
                var,
                start,
                end,
                step,
                body,
            } => {
                let _ = writeln!(
                    out,
                    "{pad}for {} in {}..{} step {step} {{",
                    var_name(k, *var),
                    e(*start),
                    e(*end)
                );
                block(k, body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Barrier => {
                let _ = writeln!(out, "{pad}barrier");
            }
            Stmt::Tile(op) => {
                let _ = writeln!(out, "{pad}{}", tile_op(k, op));
            }
            Stmt::Copy(CopyOp::Start {
                from,
                index,
                to,
                at,
            }) => {
                let buffer = k.buffers.get(from.0 as usize).map_or("?", |d| &d.name);
                let array = k.shared.get(to.0 as usize).map_or("?", |d| &d.name);
                let (i, a) = (e(*index), e(*at));
                let _ = writeln!(out, "{pad}copy_async {buffer}[{i}..] -> {array}[{a}..]");
            }
            Stmt::Copy(CopyOp::Commit) => {
                let _ = writeln!(out, "{pad}copy_commit");
            }
            Stmt::Copy(CopyOp::Wait { pending }) => {
                let _ = writeln!(out, "{pad}copy_wait {pending}");
            }
            Stmt::Group(op) => {
                let _ = writeln!(out, "{pad}{}", group_op(k, op));
            }
        }
    }
}

fn group_op(k: &Kernel, op: &GroupOp) -> String {
    let acc = |a: GroupAccId| k.group_accs.get(a.0 as usize).map_or("?", |d| &d.name);
    let shared = |s: SharedId| k.shared.get(s.0 as usize).map_or("?", |d| &d.name);
    match *op {
        GroupOp::Zero { acc: a } => format!("group_zero {}", acc(a)),
        GroupOp::Mma {
            acc: c,
            a,
            a_at,
            b,
            b_at,
        } => format!(
            "group_mma {} += {}[{}..] * {}[{}..]",
            acc(c),
            shared(a),
            e(a_at),
            shared(b),
            e(b_at)
        ),
        GroupOp::Wait { pending } => format!("group_wait {pending}"),
        GroupOp::Store {
            acc: a,
            to,
            offset,
            stride,
        } => {
            let mem = match to {
                TileMemory::Buffer(b) => k.buffers.get(b.0 as usize).map_or("?", |d| &d.name),
                TileMemory::Shared(s) => shared(s),
            };
            format!(
                "group_store {mem}[{} stride {}] = {}",
                e(offset),
                e(stride),
                acc(a)
            )
        }
    }
}

fn tile_op(k: &Kernel, op: &TileOp) -> String {
    let tile = |t: TileId| k.tiles.get(t.0 as usize).map_or("?", |d| &d.name);
    let mem = |m: TileMemory| match m {
        TileMemory::Buffer(b) => k.buffers.get(b.0 as usize).map_or("?", |d| &d.name),
        TileMemory::Shared(s) => k.shared.get(s.0 as usize).map_or("?", |d| &d.name),
    };
    match *op {
        TileOp::Zero { tile: t } => format!("tile_zero {}", tile(t)),
        TileOp::Load {
            tile: t,
            from,
            offset,
            stride,
            layout,
        } => format!(
            "tile_load {} = {}[{} stride {} {layout:?}]",
            tile(t),
            mem(from),
            e(offset),
            e(stride)
        ),
        TileOp::Mma { acc, a, b } => {
            format!("tile_mma {} += {} * {}", tile(acc), tile(a), tile(b))
        }
        TileOp::Store {
            tile: t,
            to,
            offset,
            stride,
            layout,
        } => format!(
            "tile_store {}[{} stride {} {layout:?}] = {}",
            mem(to),
            e(offset),
            e(stride),
            tile(t)
        ),
    }
}

fn var_name(k: &Kernel, v: VarId) -> String {
    k.vars
        .get(v.0 as usize)
        .map_or_else(|| format!("var{}", v.0), |d| d.name.clone())
}

fn expr(k: &Kernel, x: &Expr) -> String {
    match *x {
        Expr::Literal(l) => l.to_string(),
        Expr::Param(p) => {
            let name = k.params.get(p.0 as usize).map_or("?", |d| &d.name);
            format!("param {name}")
        }
        Expr::Builtin(b) => format!("builtin {b:?}"),
        Expr::Var(v) => var_name(k, v),
        Expr::Load { buffer, index } => {
            let name = k.buffers.get(buffer.0 as usize).map_or("?", |b| &b.name);
            format!("{name}[{}]", e(index))
        }
        Expr::LoadLane { buffer, quad, lane } => {
            let name = k.buffers.get(buffer.0 as usize).map_or("?", |b| &b.name);
            format!("{name}.quad[{}].{lane}", e(quad))
        }
        Expr::LoadShared { array, index } => {
            let name = k.shared.get(array.0 as usize).map_or("?", |s| &s.name);
            format!("{name}[{}]", e(index))
        }
        Expr::Unary { op, arg } => format!("{op:?} {}", e(arg)),
        Expr::Binary { op, lhs, rhs } => format!("{op:?} {}, {}", e(lhs), e(rhs)),
        Expr::Fma { a, b, c } => format!("Fma {}, {}, {}", e(a), e(b), e(c)),
        Expr::Select {
            cond,
            accept,
            reject,
        } => {
            format!("Select {} ? {} : {}", e(cond), e(accept), e(reject))
        }
        Expr::Cast { arg, to } => format!("Cast {} to {to}", e(arg)),
        Expr::Bitcast { arg, to } => format!("Bitcast {} to {to}", e(arg)),
        Expr::Subgroup { op, arg } => match op {
            SubgroupOp::ShuffleXor(m) => format!("SubgroupShuffleXor {}, {}", e(arg), e(m)),
            op => format!("Subgroup{op:?} {}", e(arg)),
        },
    }
}
