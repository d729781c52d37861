//! Writes the planned kernel as C: regions as loops over the invocations, the workgroup-level
//! steps between them, and the per-invocation arrays that carry values across.

use super::dots::{self, Operand};
use super::plan::{Node, Plan};
use super::spelling::{axis_name, lane_axes, C};
use super::storage::{Import, Place, Storage, VarClass};
use crate::c_family::{
    binary, buffer_name, expr_name, literal, value_type, var_name, zero, Printer, Spelling,
};
use trine_ir::{BinaryOp, ExprId, Info, Kernel, Scalar, Stmt, SubgroupOp, VarId};

/// Name of the per-invocation array of expression `e`.
fn arr(e: ExprId) -> String {
    format!("w_{}", expr_name(e))
}

/// Name of the workgroup scalar of a uniform expression `e`.
pub(super) fn scalar(e: ExprId) -> String {
    format!("u_{}", expr_name(e))
}

/// The stored value of expression `e` for invocation `lane`: its scalar where it is uniform,
/// else its array's element.
fn stored(st: &Storage, e: ExprId, lane: &str) -> String {
    match st.place(e) {
        Place::Scalar => scalar(e),
        _ => format!("{}[{lane}]", arr(e)),
    }
}

/// Name of the per-invocation array of variable `v`.
fn var_arr(k: &Kernel, v: VarId) -> String {
    format!("w_{}", var_name(k, v))
}

fn mask_name(m: usize) -> String {
    format!("m{m}")
}

/// Bytes of one value of `ty` in the C code.
pub(super) fn c_size(ty: Scalar) -> u64 {
    match ty {
        Scalar::Bool => 1,
        t => t.size() as u64,
    }
}

pub(super) struct Emitter<'a> {
    k: &'a Kernel,
    info: &'a Info,
    plan: &'a Plan<'a>,
    st: &'a Storage,
    c: &'a C,
    p: Printer<'a, C>,
    /// Invocations per workgroup.
    wg: u32,
    /// Mask arrays used so far (`m0`, `m1`, …).
    pub masks: usize,
    /// Counters of uniform loops over array variables (`u0`, `u1`, …).
    counters: usize,
}

impl<'a> Emitter<'a> {
    pub(super) fn new(
        k: &'a Kernel,
        info: &'a Info,
        plan: &'a Plan<'a>,
        st: &'a Storage,
        c: &'a C,
    ) -> Self {
        Emitter {
            k,
            info,
            plan,
            st,
            c,
            p: Printer::new(k, info, c),
            wg: k.invocations(),
            masks: 0,
            counters: 0,
        }
    }

    /// The text of the workgroup body at nesting `depth`.
    pub(super) fn body(mut self, depth: usize) -> (String, usize) {
        self.nodes(&self.plan.body, None, depth);
        let masks = self.masks;
        (self.p.finish(), masks)
    }

    fn line(&mut self, depth: usize, text: &str) {
        self.p.line(depth, text);
    }

    fn ty(&self, e: ExprId) -> &'static str {
        value_type(self.info.ty(e))
    }

    fn at(&self, e: ExprId, lane: &str) -> String {
        stored(self.st, e, lane)
    }

    /// A value of expression `e` at workgroup level where it is uniform: invocation 0's.
    fn uniform(&self, e: ExprId) -> String {
        self.at(e, "0")
    }

    fn nodes(&mut self, nodes: &[Node], mask: Option<usize>, depth: usize) {
        for n in nodes {
            match n {
                Node::Region(r) => self.region(*r, mask, depth),
                // GCC's hint, which x86 compiles to `prefetcht0`; a hint inside a region is
                // dropped (`Spelling::prefetch`), as it would keep GCC from vectorising it.
                Node::Prefetch { buffer, index } => {
                    let b = buffer_name(self.k, *buffer);
                    let text = format!("__builtin_prefetch(&{b}[{}]);", self.uniform(*index));
                    self.line(depth, &text);
                }
                Node::Subgroup { id, op, arg } => self.subgroup(*id, *op, *arg, mask, depth),
                Node::Dots { id } => self.dots(*id, depth),
                Node::If {
                    cond,
                    uniform: true,
                    then,
                    otherwise,
                } => {
                    self.line(depth, &format!("if ({}) {{", self.uniform(*cond)));
                    self.nodes(then, None, depth + 1);
                    if !otherwise.is_empty() {
                        self.line(depth, "} else {");
                        self.nodes(otherwise, None, depth + 1);
                    }
                    self.line(depth, "}");
                }
                Node::If {
                    cond,
                    uniform: false,
                    then,
                    otherwise,
                } => self.masked_if(*cond, then, otherwise, mask, depth),
                Node::Loop {
                    var,
                    start,
                    end,
                    step,
                    uniform: true,
                    body,
                } => self.uniform_loop(*var, *start, *end, *step, body, depth),
                Node::Loop {
                    var,
                    start,
                    end,
                    step,
                    uniform: false,
                    body,
                } => self.masked_loop(*var, *start, *end, *step, body, mask, depth),
            }
        }
    }

    /// Opens the loop over invocations (`lid`, and `lx`/`ly`/`lz` for several axes); returns
    /// the depth of its body and how many braces to close.
    fn open_lanes(&mut self, depth: usize) -> (usize, usize) {
        let wg = self.k.workgroup_size;
        let axes = lane_axes(wg);
        // GCC's `ivdep`: iterations are independent invocations, which the IR lets touch the
        // same memory only with a barrier between (otherwise it is a race on every backend).
        if axes.len() <= 1 {
            self.line(depth, "#pragma GCC ivdep");
            self.line(
                depth,
                &format!("for (uint32_t lid = 0u; lid < {}u; lid++) {{", self.wg),
            );
            return (depth + 1, 1);
        }
        let mut d = depth;
        for &a in axes.iter().rev() {
            let l = format!("l{}", axis_name(a));
            if a == axes[0] {
                self.line(d, "#pragma GCC ivdep");
            }
            self.line(
                d,
                &format!("for (uint32_t {l} = 0u; {l} < {}u; {l}++) {{", wg[a]),
            );
            d += 1;
        }
        let strides = [1, wg[0], wg[0] * wg[1]];
        let terms: Vec<String> = axes
            .iter()
            .map(|&a| match strides[a] {
                1 => format!("l{}", axis_name(a)),
                s => format!("l{} * {s}u", axis_name(a)),
            })
            .collect();
        self.line(d, &format!("const uint32_t lid = {};", terms.join(" + ")));
        (d, axes.len())
    }

    fn close(&mut self, depth: usize, braces: usize) {
        for i in (0..braces).rev() {
            self.line(depth + i, "}");
        }
    }

    fn region(&mut self, r: usize, mask: Option<usize>, depth: usize) {
        self.p.forget_shadows();
        let (d, braces) = self.open_lanes(depth);
        if let Some(m) = mask {
            self.line(d, &format!("if (!{}[lid]) continue;", mask_name(m)));
        }
        let io = &self.st.regions[r];
        let k = self.k;
        for &i in &io.imports {
            match i {
                Import::Load(e) => {
                    let text = format!(
                        "const {} {} = {};",
                        self.ty(e),
                        expr_name(e),
                        self.at(e, "lid")
                    );
                    self.line(d, &text);
                }
                Import::Recompute(e) => self.p.stmt(&Stmt::Let(e), d),
            }
        }
        for &v in &io.vars {
            let ty = value_type(k.vars[v.0 as usize].ty);
            let text = format!("{ty} {} = {}[lid];", var_name(k, v), var_arr(k, v));
            self.line(d, &text);
        }
        for &v in &io.locals {
            let ty = k.vars[v.0 as usize].ty;
            let init = literal(self.c, zero(ty));
            let text = format!("{} {} = {init};", value_type(ty), var_name(k, v));
            self.line(d, &text);
        }
        for s in self.plan.regions[r].stmts {
            self.p.stmt(s, d);
            if let Stmt::Let(e) = s {
                if self.st.place(*e) != Place::Local {
                    let text = format!("{} = {};", self.at(*e, "lid"), expr_name(*e));
                    self.line(d, &text);
                }
            }
        }
        for &v in &io.writes {
            let text = format!("{}[lid] = {};", var_arr(k, v), var_name(k, v));
            self.line(d, &text);
        }
        self.close(depth, braces);
    }

    /// A sum of packed dot products over every invocation ([`super::dots`]).
    fn dots(&mut self, id: ExprId, depth: usize) {
        let sum = &self.plan.sums[&id];
        let operand = |e: ExprId| match self.st.place(e) {
            Place::Scalar => Operand::Scalar(scalar(e)),
            _ => Operand::Array(arr(e)),
        };
        let operands: Vec<(Operand, Operand)> = sum
            .pairs
            .iter()
            .map(|&(a, b)| (operand(a), operand(b)))
            .collect();
        for (nested, text) in dots::lines(id, sum, &operands, self.wg) {
            self.line(depth + nested, &text);
        }
    }

    /// A reduction folds the active invocations of each subgroup in `trine_ir`'s tree order
    /// (the upper lanes onto the lower, halving), combining with the printer's operator text
    /// (so f16 rounds per step and i32 wraps), as the interpreter does; f32 over whole
    /// subgroups takes sixteen lanes a register where the CPU has AVX-512. A shuffle reads
    /// lane `self ^ mask` of the same subgroup.
    fn subgroup(
        &mut self,
        id: ExprId,
        op: SubgroupOp,
        arg: ExprId,
        mask: Option<usize>,
        depth: usize,
    ) {
        let sg = self.c.subgroup_size;
        let wg = self.wg;
        let out = arr(id);
        let st = self.st;
        let src = |l: &str| stored(st, arg, l);
        let ty = self.info.ty(arg);
        let t = value_type(ty);
        let active = |l: &str| mask.map(|m| format!("{}[{l}]", mask_name(m)));
        let combine = match op {
            SubgroupOp::Sum => BinaryOp::Add,
            SubgroupOp::Min => BinaryOp::Min,
            SubgroupOp::Max => BinaryOp::Max,
            SubgroupOp::ShuffleXor(m) => {
                // The mask keeps the source inside the subgroup; a subgroup cut short by the
                // end of the workgroup reads the invocation's own value past it.
                let d = depth + 1;
                self.line(depth, &format!("for (uint32_t l = 0u; l < {wg}u; l++) {{"));
                if let Some(a) = active("l") {
                    self.line(d, &format!("if (!{a}) continue;"));
                }
                self.line(
                    d,
                    &format!(
                        "uint32_t from = (l & ~{}u) | ((l ^ {}) & {}u);",
                        sg - 1,
                        self.at(m, "l"),
                        sg - 1
                    ),
                );
                if !wg.is_multiple_of(sg) {
                    self.line(d, &format!("if (from >= {wg}u) from = l;"));
                }
                self.line(d, &format!("{out}[l] = {};", src("from")));
                self.line(depth, "}");
                return;
            }
        };
        let step = binary(self.c, combine, ty, "acc", "o");
        let folds = SubgroupOp::folds(sg as usize);
        let whole = mask.is_none() && wg.is_multiple_of(sg);
        // Sixteen lanes a register need whole subgroups of f32 held per invocation.
        let vector = whole
            && ty == Scalar::F32
            && sg <= 16
            && wg.is_multiple_of(16)
            && self.st.place(arg) == Place::Array;
        if vector {
            // Sixteen lanes a register: each lane folds in lane `l ^ h` of its own subgroup,
            // so lane 0 of each takes the tree's operands in the tree's order.
            let f = match combine {
                BinaryOp::Add => "add",
                BinaryOp::Min => "min",
                _ => "max",
            };
            self.line(depth, "#ifdef TRINE_V16");
            let d = depth + 1;
            self.line(
                depth,
                &format!("for (uint32_t g = 0u; g < {wg}u; g += 16u) {{"),
            );
            self.line(d, &format!("__m512 v = _mm512_loadu_ps(&{}[g]);", arr(arg)));
            for (h, _) in &folds {
                self.line(
                    d,
                    &format!("v = trine_v16_{f}(v, trine_v16_lane_xor(v, {h}));"),
                );
            }
            self.line(
                d,
                &format!("_mm512_storeu_ps(&{out}[g], trine_v16_first(v, {sg}));"),
            );
            self.line(depth, "}");
            self.line(depth, "#else");
        }
        let d = depth + 1;
        self.line(
            depth,
            &format!("for (uint32_t g = 0u; g < {wg}u; g += {sg}u) {{"),
        );
        self.line(d, &format!("{t} r[{sg}];"));
        if whole {
            self.line(
                d,
                &format!(
                    "for (uint32_t j = 0u; j < {sg}u; j++) r[j] = {};",
                    src("g + j")
                ),
            );
            for (h, lanes) in &folds {
                self.line(
                    d,
                    &format!(
                        "for (uint32_t i = 0u; i < {lanes}u; i++) {{ const {t} acc = r[i], o = r[i + {h}u]; r[i] = {step}; }}"
                    ),
                );
            }
            self.line(
                d,
                &format!("for (uint32_t j = 0u; j < {sg}u; j++) {out}[g + j] = r[0];"),
            );
        } else {
            // Lanes past the workgroup's end or inactive take no part: a fold keeps the
            // other operand.
            let present = match active("l") {
                Some(a) => format!("l < {wg}u && {a}"),
                None => format!("l < {wg}u"),
            };
            let init = literal(self.c, zero(ty));
            self.line(d, &format!("bool p[{sg}];"));
            self.line(d, &format!("for (uint32_t j = 0u; j < {sg}u; j++) {{"));
            self.line(d + 1, "const uint32_t l = g + j;");
            self.line(d + 1, &format!("p[j] = {present};"));
            self.line(d + 1, &format!("r[j] = p[j] ? {} : {init};", src("l")));
            self.line(d, "}");
            for (h, lanes) in &folds {
                self.line(
                    d,
                    &format!(
                        "for (uint32_t i = 0u; i < {lanes}u; i++) if (p[i + {h}u]) {{ const {t} acc = r[i], o = r[i + {h}u]; r[i] = p[i] ? {step} : o; p[i] = true; }}"
                    ),
                );
            }
            let end = format!("g + {sg}u < {wg}u ? g + {sg}u : {wg}u");
            let store = match active("l") {
                Some(a) => format!("if ({a}) {out}[l] = r[0];"),
                None => format!("{out}[l] = r[0];"),
            };
            self.line(
                d,
                &format!("for (uint32_t l = g; l < ({end}); l++) {store}"),
            );
        }
        self.line(depth, "}");
        if vector {
            self.line(depth, "#endif");
        }
    }

    fn new_mask(&mut self) -> usize {
        self.masks += 1;
        self.masks - 1
    }

    fn masked_if(
        &mut self,
        cond: ExprId,
        then: &[Node],
        otherwise: &[Node],
        mask: Option<usize>,
        depth: usize,
    ) {
        let t = self.new_mask();
        let e = (!otherwise.is_empty()).then(|| self.new_mask());
        let wg = self.wg;
        let c = self.at(cond, "l");
        // `&&` leaves an inactive invocation's condition unread: it was never computed.
        let (yes, no) = match mask {
            Some(m) => (
                format!("{}[l] && {c}", mask_name(m)),
                format!("{}[l] && !{c}", mask_name(m)),
            ),
            None => (c.clone(), format!("!{c}")),
        };
        self.line(depth, &format!("for (uint32_t l = 0u; l < {wg}u; l++) {{"));
        self.line(depth + 1, &format!("{}[l] = {yes};", mask_name(t)));
        if let Some(e) = e {
            self.line(depth + 1, &format!("{}[l] = {no};", mask_name(e)));
        }
        self.line(depth, "}");
        for (m, block) in [(Some(t), then), (e, otherwise)] {
            let Some(m) = m else { continue };
            self.line(
                depth,
                &format!("if (trine_any({}, {wg}u)) {{", mask_name(m)),
            );
            self.nodes(block, Some(m), depth + 1);
            self.line(depth, "}");
        }
    }

    fn uniform_loop(
        &mut self,
        var: VarId,
        start: ExprId,
        end: ExprId,
        step: u32,
        body: &[Node],
        depth: usize,
    ) {
        let bound = self.c.loop_end(&self.uniform(end), step);
        let from = self.uniform(start);
        match self.st.var(var) {
            VarClass::Uniform => {
                let v = var_name(self.k, var);
                self.line(
                    depth,
                    &format!("for ({v} = {from}; {v} < {bound}; {v} += {step}u) {{"),
                );
                self.nodes(body, None, depth + 1);
                self.line(depth, "}");
            }
            _ => {
                // The variable is also written elsewhere, so it is an array: every invocation
                // gets the counter at each iteration, and its value past the end afterwards.
                let u = format!("u{}", self.counters);
                self.counters += 1;
                let w = var_arr(self.k, var);
                let wg = self.wg;
                let broadcast = format!("for (uint32_t l = 0u; l < {wg}u; l++) {w}[l] = {u};");
                self.line(depth, "{");
                let d = depth + 1;
                self.line(d, &format!("uint32_t {u};"));
                self.line(
                    d,
                    &format!("for ({u} = {from}; {u} < {bound}; {u} += {step}u) {{"),
                );
                self.line(d + 1, &broadcast);
                self.nodes(body, None, d + 1);
                self.line(d, "}");
                self.line(d, &broadcast);
                self.line(depth, "}");
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn masked_loop(
        &mut self,
        var: VarId,
        start: ExprId,
        end: ExprId,
        step: u32,
        body: &[Node],
        mask: Option<usize>,
        depth: usize,
    ) {
        let live_id = self.new_mask();
        let live = mask_name(live_id);
        let wg = self.wg;
        let w = var_arr(self.k, var);
        let bound = self.c.loop_end(&self.at(end, "l"), step);
        let d = depth + 1;
        self.line(depth, &format!("for (uint32_t l = 0u; l < {wg}u; l++) {{"));
        if let Some(m) = mask {
            self.line(
                d,
                &format!(
                    "if (!{}[l]) {{ {live}[l] = false; continue; }}",
                    mask_name(m)
                ),
            );
        }
        self.line(d, &format!("{w}[l] = {};", self.at(start, "l")));
        self.line(d, &format!("{live}[l] = {w}[l] < {bound};"));
        self.line(depth, "}");
        self.line(depth, &format!("while (trine_any({live}, {wg}u)) {{"));
        self.nodes(body, Some(live_id), d);
        self.line(d, &format!("for (uint32_t l = 0u; l < {wg}u; l++) {{"));
        self.line(d + 1, &format!("if (!{live}[l]) continue;"));
        self.line(d + 1, &format!("{w}[l] += {step}u;"));
        self.line(d + 1, &format!("{live}[l] = {w}[l] < {bound};"));
        self.line(d, "}");
        self.line(depth, "}");
    }
}
