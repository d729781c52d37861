//! The kernel's interface as naga declares it: buffers, the push-constant block and shared
//! arrays as globals, builtins as entry-point arguments. The layout is [`crate::abi`]'s.

use super::types;
use crate::abi;
use naga::{
    AddressSpace, Binding, BuiltIn, FunctionArgument, GlobalVariable, Handle, MemoryDecorations,
    ResourceBinding, Span, StorageAccess,
};
use std::num::NonZeroU32;
use trine_ir::{BufferId, Expr, Kernel};

/// Handles of the module's global variables, by IR index.
pub(super) struct Globals {
    pub buffers: Vec<Handle<GlobalVariable>>,
    /// By IR index, whether the buffer is declared as quads (`array<vec4<u32>>`) rather than
    /// words: a read-only `U32` buffer the kernel loads quads of ([`Expr::LoadLane`]), so that
    /// a quad is one 16-byte load. Its word loads index into a quad.
    pub quads: Vec<bool>,
    pub shared: Vec<Handle<GlobalVariable>>,
    /// The push-constant block: the grid words, then the parameters.
    pub immediates: Handle<GlobalVariable>,
}

/// Names of the grid words in the push-constant block, in [`crate::abi`] order.
const GRID_WORD_NAMES: [&str; abi::GRID_WORDS as usize] =
    ["grid_x", "grid_y", "grid_z", "phys_x", "fold"];

pub(super) fn declare_globals(module: &mut naga::Module, kernel: &Kernel) -> Globals {
    let mut global = |name: &str, space, binding, ty| {
        let var = GlobalVariable {
            name: Some(name.to_string()),
            space,
            binding,
            ty,
            init: None,
            memory_decorations: MemoryDecorations::empty(),
        };
        module.global_variables.append(var, Span::UNDEFINED)
    };
    let types = &mut module.types;

    let quads: Vec<bool> = (0u32..)
        .zip(&kernel.buffers)
        .map(|(i, b)| {
            !b.access.can_write()
                && kernel
                    .exprs
                    .iter()
                    .any(|e| matches!(*e, Expr::LoadLane { buffer, .. } if buffer == BufferId(i)))
        })
        .collect();
    let buffers = (0u32..)
        .zip(&kernel.buffers)
        .zip(&quads)
        .map(|((binding, b), &quads)| {
            let access = if b.access.can_write() {
                StorageAccess::LOAD | StorageAccess::STORE
            } else {
                StorageAccess::LOAD
            };
            let ty = if quads {
                types::quad_array(types)
            } else {
                types::array(types, types::storage_elem(b.elem), None)
            };
            let binding = ResourceBinding { group: 0, binding };
            global(&b.name, AddressSpace::Storage { access }, Some(binding), ty)
        })
        .collect();

    let members = GRID_WORD_NAMES
        .iter()
        .map(|name| (name.to_string(), naga::Scalar::U32))
        .chain(
            kernel
                .params
                .iter()
                .map(|p| (p.name.clone(), types::scalar(p.ty))),
        )
        .collect::<Vec<_>>();
    let block = types::word_struct(types, "Immediates", &members);
    let immediates = global("immediates", AddressSpace::Immediate, None, block);

    let shared = kernel
        .shared
        .iter()
        .map(|s| {
            let len = NonZeroU32::new(s.len).expect("validated shared arrays are non-empty");
            let ty = types::array(types, types::scalar(s.elem), Some(len));
            global(&s.name, AddressSpace::WorkGroup, None, ty)
        })
        .collect();

    Globals {
        buffers,
        quads,
        shared,
        immediates,
    }
}

/// Entry-point argument indices of the builtins.
pub(super) const ARG_LOCAL_ID: u32 = 0;
pub(super) const ARG_WORKGROUP_ID: u32 = 1;
pub(super) const ARG_LOCAL_INDEX: u32 = 2;
/// The subgroup builtins exist only in kernels that declare the subgroup capability: naga
/// rejects them otherwise.
pub(super) const ARG_SUBGROUP_SIZE: u32 = 3;
pub(super) const ARG_SUBGROUP_INVOCATION_ID: u32 = 4;
pub(super) const ARG_SUBGROUP_ID: u32 = 5;

pub(super) fn entry_arguments(
    types: &mut naga::UniqueArena<naga::Type>,
    kernel: &Kernel,
) -> Vec<FunctionArgument> {
    let vec3 = types::vec3_u32(types);
    let u32 = types::scalar_ty(types, naga::Scalar::U32);
    let mut args = vec![
        ("local_id", vec3, BuiltIn::LocalInvocationId),
        ("workgroup_id", vec3, BuiltIn::WorkGroupId),
        ("local_index", u32, BuiltIn::LocalInvocationIndex),
    ];
    if kernel.capabilities.subgroup {
        args.extend([
            ("subgroup_size", u32, BuiltIn::SubgroupSize),
            ("subgroup_invocation_id", u32, BuiltIn::SubgroupInvocationId),
            ("subgroup_id", u32, BuiltIn::SubgroupId),
        ]);
    }
    args.into_iter()
        .map(|(name, ty, builtin)| FunctionArgument {
            name: Some(name.to_string()),
            ty,
            binding: Some(Binding::BuiltIn(builtin)),
        })
        .collect()
}
