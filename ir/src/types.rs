//! Scalar types, buffer access modes and literal values.

use std::fmt;

/// A scalar type. trine's IR has no vectors: kernels are written per invocation, and every
/// lowering is free to vectorise.
///
/// Three types exist only in buffers (`storage-only`): a load from a buffer of `BF16`, `U8` or
/// `I8` yields an `F32`, `U32` or `I32` value, and a kernel cannot store to such a buffer. They
/// carry packed weights (GGUF quant blocks, bf16 checkpoints), which kernels only read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// IEEE binary32. HIP `float`, SPIR-V `OpTypeFloat 32`.
    F32,
    /// IEEE binary16. Arithmetic rounds every result to f16. HIP `_Float16` / CUDA `__half`,
    /// SPIR-V `OpTypeFloat 16` (needs `Float16` and 16-bit storage).
    F16,
    /// bfloat16, storage-only: loads widen to `F32` exactly (the 16 bits become the high half).
    BF16,
    /// Two's complement 32-bit integer. Overflow wraps.
    I32,
    /// Unsigned 32-bit integer. Overflow wraps.
    U32,
    /// Boolean; the result of comparisons. Cannot live in buffers.
    Bool,
    /// Unsigned byte, storage-only: loads zero-extend to `U32`.
    U8,
    /// Signed byte, storage-only: loads sign-extend to `I32`.
    I8,
}

impl Scalar {
    /// Size in bytes of one element in a buffer.
    pub fn size(self) -> usize {
        match self {
            Scalar::F32 | Scalar::I32 | Scalar::U32 | Scalar::Bool => 4,
            Scalar::F16 | Scalar::BF16 => 2,
            Scalar::U8 | Scalar::I8 => 1,
        }
    }

    /// The type a load from a buffer of this element type produces.
    pub fn loaded(self) -> Scalar {
        match self {
            Scalar::BF16 => Scalar::F32,
            Scalar::U8 => Scalar::U32,
            Scalar::I8 => Scalar::I32,
            s => s,
        }
    }

    /// Whether this type exists only in buffers (see the type's documentation).
    pub fn is_storage_only(self) -> bool {
        matches!(self, Scalar::BF16 | Scalar::U8 | Scalar::I8)
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F32 | Scalar::F16 | Scalar::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, Scalar::I32 | Scalar::U32 | Scalar::U8 | Scalar::I8)
    }

    pub fn name(self) -> &'static str {
        match self {
            Scalar::F32 => "f32",
            Scalar::F16 => "f16",
            Scalar::BF16 => "bf16",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::Bool => "bool",
            Scalar::U8 => "u8",
            Scalar::I8 => "i8",
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a kernel may use a global buffer. HIP: `const T*` for `Read`; SPIR-V: the
/// `NonWritable` decoration for `Read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    pub fn can_read(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    pub fn can_write(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "read_write",
        }
    }
}

/// A constant value. Floats are kept as bit patterns so that kernels hash and compare exactly
/// (a NaN literal equals itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Literal {
    F32(u32),
    F16(u16),
    I32(i32),
    U32(u32),
    Bool(bool),
}

impl Literal {
    pub fn f32(v: f32) -> Self {
        Literal::F32(v.to_bits())
    }
    pub fn f16(v: half::f16) -> Self {
        Literal::F16(v.to_bits())
    }
    pub fn ty(self) -> Scalar {
        match self {
            Literal::F32(_) => Scalar::F32,
            Literal::F16(_) => Scalar::F16,
            Literal::I32(_) => Scalar::I32,
            Literal::U32(_) => Scalar::U32,
            Literal::Bool(_) => Scalar::Bool,
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Literal::F32(b) => {
                let v = f32::from_bits(b);
                if v.is_finite() {
                    write!(f, "{v:?}f32")
                } else {
                    write!(f, "f32_bits(0x{b:08x})")
                }
            }
            Literal::F16(b) => {
                let v = half::f16::from_bits(b);
                if v.is_finite() {
                    write!(f, "{:?}f16", v.to_f32())
                } else {
                    write!(f, "f16_bits(0x{b:04x})")
                }
            }
            Literal::I32(v) => write!(f, "{v}i32"),
            Literal::U32(v) => write!(f, "{v}u32"),
            Literal::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// The value of a scalar parameter at dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    F32(f32),
    I32(i32),
    U32(u32),
}

impl ParamValue {
    pub fn ty(self) -> Scalar {
        match self {
            ParamValue::F32(_) => Scalar::F32,
            ParamValue::I32(_) => Scalar::I32,
            ParamValue::U32(_) => Scalar::U32,
        }
    }
    /// The 4 bytes a backend passes (push-constant word, kernel argument).
    pub fn bits(self) -> u32 {
        match self {
            ParamValue::F32(v) => v.to_bits(),
            ParamValue::I32(v) => v as u32,
            ParamValue::U32(v) => v,
        }
    }
}
