//! Scalar operations on values held as 32-bit patterns (f16 in the low half, Bool as 0/1).
//!
//! f32 arithmetic is IEEE single precision, as on GPUs. f16 arithmetic computes in f32 and
//! rounds each result to f16, which equals native f16 arithmetic for +, −, ×, ÷ and fma-free
//! code. Transcendentals are computed in f64 and rounded, so the reference is at least as
//! accurate as any device.

use crate::kernel::{BinaryOp, UnaryOp};
use crate::types::Scalar;
use half::f16;

pub(crate) enum OpError {
    DivideByZero,
    FloatToInt(String),
}

fn to_f(ty: Scalar, a: u32) -> f32 {
    match ty {
        Scalar::F16 => f16::from_bits(a as u16).to_f32(),
        _ => f32::from_bits(a),
    }
}

fn from_f(ty: Scalar, v: f32) -> u32 {
    match ty {
        Scalar::F16 => f16::from_f32(v).to_bits() as u32,
        _ => v.to_bits(),
    }
}

fn b(v: bool) -> u32 {
    v as u32
}

/// Widens an element loaded from a buffer of type `elem` to its value type.
pub(crate) fn widen(elem: Scalar, bits: u32) -> u32 {
    match elem {
        Scalar::BF16 => bits << 16,
        Scalar::I8 => bits as u8 as i8 as i32 as u32,
        Scalar::U8 => bits & 0xff,
        Scalar::F16 => bits & 0xffff,
        _ => bits,
    }
}

pub(crate) fn unary(op: UnaryOp, ty: Scalar, a: u32) -> u32 {
    if ty.is_float() {
        let x = to_f(ty, a);
        let d = x as f64;
        let r = match op {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => crate::exp::exp_f32(x),
            UnaryOp::Log => d.ln() as f32,
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => (1.0 / d.sqrt()) as f32,
            UnaryOp::Sin => d.sin() as f32,
            UnaryOp::Cos => d.cos() as f32,
            UnaryOp::Tanh => d.tanh() as f32,
            UnaryOp::Floor => x.floor(),
            // The validator admits no other op on floats.
            UnaryOp::Not | UnaryOp::CountOnes | UnaryOp::HalfFromBits => x,
        };
        return from_f(ty, r);
    }
    match (op, ty) {
        (UnaryOp::Not, Scalar::Bool) => b(a == 0),
        (UnaryOp::Not, _) => !a,
        (UnaryOp::Neg, _) => (a as i32).wrapping_neg() as u32,
        (UnaryOp::Abs, _) => (a as i32).wrapping_abs() as u32,
        (UnaryOp::CountOnes, _) => a.count_ones(),
        (UnaryOp::HalfFromBits, _) => half::f16::from_bits(a as u16).to_f32().to_bits(),
        _ => a,
    }
}

pub(crate) fn binary(op: BinaryOp, ty: Scalar, a: u32, c: u32) -> Result<u32, OpError> {
    use BinaryOp::*;
    let bytes = |v: u32| v.to_le_bytes();
    match op {
        Dot4I8 => {
            let dot: i32 = bytes(a)
                .iter()
                .zip(bytes(c))
                .map(|(&x, y)| i32::from(x as i8) * i32::from(y as i8))
                .sum();
            return Ok(dot as u32);
        }
        Dot4U8 => {
            let dot: u32 = bytes(a)
                .iter()
                .zip(bytes(c))
                .map(|(&x, y)| u32::from(x) * u32::from(y))
                .sum();
            return Ok(dot);
        }
        PackHalves => {
            let bits = |v: u32| u32::from(half::f16::from_f32(to_f(ty, v)).to_bits());
            return Ok(bits(a) | bits(c) << 16);
        }
        _ => {}
    }
    if ty.is_float() {
        let (x, y) = (to_f(ty, a), to_f(ty, c));
        let r = match op {
            Add => x + y,
            Sub => x - y,
            Mul => x * y,
            Div => x / y,
            Rem => x % y,
            Min => x.min(y),
            Max => x.max(y),
            Pow => (x as f64).powf(y as f64) as f32,
            Eq => return Ok(b(x == y)),
            Ne => return Ok(b(x != y)),
            Lt => return Ok(b(x < y)),
            Le => return Ok(b(x <= y)),
            Gt => return Ok(b(x > y)),
            Ge => return Ok(b(x >= y)),
            // The validator admits no bit ops or packed dots on floats.
            And | Or | Xor | Shl | Shr | Dot4I8 | Dot4U8 | PackHalves => x,
        };
        return Ok(from_f(ty, r));
    }
    let signed = ty == Scalar::I32;
    let (si, sj) = (a as i32, c as i32);
    Ok(match op {
        Add => a.wrapping_add(c),
        Sub => a.wrapping_sub(c),
        Mul => a.wrapping_mul(c),
        Div | Rem if c == 0 => return Err(OpError::DivideByZero),
        Div if signed => si.wrapping_div(sj) as u32,
        Div => a / c,
        Rem if signed => si.wrapping_rem(sj) as u32,
        Rem => a % c,
        Min if signed => si.min(sj) as u32,
        Min => a.min(c),
        Max if signed => si.max(sj) as u32,
        Max => a.max(c),
        And => a & c,
        Or => a | c,
        Xor => a ^ c,
        Shl => a.wrapping_shl(c & 31),
        Shr if signed => (si >> (c & 31)) as u32,
        Shr => a >> (c & 31),
        Eq => b(a == c),
        Ne => b(a != c),
        Lt if signed => b(si < sj),
        Lt => b(a < c),
        Le if signed => b(si <= sj),
        Le => b(a <= c),
        Gt if signed => b(si > sj),
        Gt => b(a > c),
        Ge if signed => b(si >= sj),
        Ge => b(a >= c),
        // Pow is float-only; the packed dots and halves returned above.
        Pow | Dot4I8 | Dot4U8 | PackHalves => a,
    })
}

pub(crate) fn fma(ty: Scalar, a: u32, b: u32, c: u32) -> u32 {
    let r = to_f(ty, a).mul_add(to_f(ty, b), to_f(ty, c));
    from_f(ty, r)
}

pub(crate) fn cast(from: Scalar, to: Scalar, a: u32) -> Result<u32, OpError> {
    use Scalar::*;
    if from == to {
        return Ok(a);
    }
    Ok(match (from, to) {
        (Bool, _) => match to {
            F32 | F16 => from_f(to, a as f32),
            _ => a,
        },
        (_, Bool) => match from {
            F32 | F16 => b(to_f(from, a) != 0.0),
            _ => b(a != 0),
        },
        (F32 | F16, F32 | F16) => from_f(to, to_f(from, a)),
        (F32 | F16, I32 | U32) => {
            let x = to_f(from, a).trunc();
            let ok = match to {
                I32 => (-2147483648.0..2147483648.0).contains(&x),
                _ => (0.0..4294967296.0).contains(&x),
            };
            if !ok {
                return Err(OpError::FloatToInt(format!("{}", to_f(from, a))));
            }
            match to {
                I32 => x as i32 as u32,
                _ => x as u32,
            }
        }
        (I32, F32 | F16) => from_f(to, a as i32 as f32),
        (U32, F32 | F16) => from_f(to, a as f32),
        // Integer to integer keeps the bits.
        _ => a,
    })
}

/// Combines two lanes' values for a subgroup reduction.
pub(crate) fn reduce(op: BinaryOp, ty: Scalar, a: u32, c: u32) -> u32 {
    binary(op, ty, a, c).unwrap_or(a)
}
