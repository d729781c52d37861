//! naga types for IR scalars and the aggregates the module declares.
//!
//! Types are added on demand: naga writes every type of the arena to SPIR-V, and an unused
//! `f16` would still make the module declare the `Float16` capability.

use naga::{ArraySize, Handle, Span, Type, TypeInner, UniqueArena, VectorSize};
use std::num::NonZeroU32;
use trine_ir::Scalar;

/// The naga scalar an IR value of type `s` is held in; for a storage-only type, the type its
/// loads widen to (its buffers are declared through [`storage_elem`]).
pub(super) fn scalar(s: Scalar) -> naga::Scalar {
    match s {
        Scalar::F32 => naga::Scalar::F32,
        Scalar::F16 => naga::Scalar::F16,
        Scalar::I32 => naga::Scalar::I32,
        Scalar::U32 => naga::Scalar::U32,
        Scalar::Bool => naga::Scalar::BOOL,
        Scalar::BF16 => naga::Scalar::F32,
        Scalar::U8 => naga::Scalar::U32,
        Scalar::I8 => naga::Scalar::I32,
    }
}

/// The element type a buffer of `elem` is declared with: storage-only types are packed into
/// `u32` words (see [`crate::abi`]).
pub(super) fn storage_elem(elem: Scalar) -> naga::Scalar {
    if elem.is_storage_only() {
        naga::Scalar::U32
    } else {
        scalar(elem)
    }
}

fn insert(types: &mut UniqueArena<Type>, name: Option<&str>, inner: TypeInner) -> Handle<Type> {
    types.insert(
        Type {
            name: name.map(str::to_string),
            inner,
        },
        Span::UNDEFINED,
    )
}

pub(super) fn scalar_ty(types: &mut UniqueArena<Type>, s: naga::Scalar) -> Handle<Type> {
    insert(types, None, TypeInner::Scalar(s))
}

pub(super) fn vec2_f32(types: &mut UniqueArena<Type>) -> Handle<Type> {
    insert(
        types,
        None,
        TypeInner::Vector {
            size: VectorSize::Bi,
            scalar: naga::Scalar::F32,
        },
    )
}

pub(super) fn vec3_u32(types: &mut UniqueArena<Type>) -> Handle<Type> {
    insert(
        types,
        None,
        TypeInner::Vector {
            size: VectorSize::Tri,
            scalar: naga::Scalar::U32,
        },
    )
}

/// `array<vec4<u32>>`, runtime-sized: a buffer of words seen a 16-byte quad at a time.
pub(super) fn quad_array(types: &mut UniqueArena<Type>) -> Handle<Type> {
    let base = insert(
        types,
        None,
        TypeInner::Vector {
            size: VectorSize::Quad,
            scalar: naga::Scalar::U32,
        },
    );
    insert(
        types,
        None,
        TypeInner::Array {
            base,
            size: ArraySize::Dynamic,
            stride: trine_ir::COPY_BYTES,
        },
    )
}

/// `array<s>` (runtime-sized) when `len` is `None`, else `array<s, len>`; tightly packed.
pub(super) fn array(
    types: &mut UniqueArena<Type>,
    s: naga::Scalar,
    len: Option<NonZeroU32>,
) -> Handle<Type> {
    let base = scalar_ty(types, s);
    let size = len.map_or(ArraySize::Dynamic, ArraySize::Constant);
    insert(
        types,
        None,
        TypeInner::Array {
            base,
            size,
            stride: u32::from(s.width),
        },
    )
}

/// The cooperative matrix a tile of `role` is: 16 × 16, f16 operands and an f32 accumulator.
pub(super) fn tile(types: &mut UniqueArena<Type>, role: trine_ir::TileRole) -> Handle<Type> {
    use naga::{CooperativeRole, CooperativeSize};
    const _: () = assert!(trine_ir::TILE == CooperativeSize::Sixteen as u32);
    let role = match role {
        trine_ir::TileRole::A => CooperativeRole::A,
        trine_ir::TileRole::B => CooperativeRole::B,
        trine_ir::TileRole::Acc => CooperativeRole::C,
    };
    let scalar = match role {
        CooperativeRole::C => naga::Scalar::F32,
        _ => naga::Scalar::F16,
    };
    insert(
        types,
        None,
        TypeInner::CooperativeMatrix {
            columns: CooperativeSize::Sixteen,
            rows: CooperativeSize::Sixteen,
            scalar,
            role,
        },
    )
}

/// A struct of consecutive 32-bit members, the layout of the push-constant block.
pub(super) fn word_struct(
    types: &mut UniqueArena<Type>,
    name: &str,
    members: &[(String, naga::Scalar)],
) -> Handle<Type> {
    let members = members
        .iter()
        .zip(0u32..)
        .map(|((member, s), i)| naga::StructMember {
            name: Some(member.clone()),
            ty: scalar_ty(types, *s),
            binding: None,
            offset: 4 * i,
        })
        .collect::<Vec<_>>();
    let span = 4 * members.len() as u32;
    insert(types, Some(name), TypeInner::Struct { members, span })
}
