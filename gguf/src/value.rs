//! Metadata values and their typed views. The conversions here back [`super::Gguf`]'s getters,
//! so a wrong or out-of-range value is reported with the key it was read for.

use super::error::GgufError;

/// One metadata value. Arrays hold values of one type (GGUF's rule); they may nest.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

/// GGUF's `gguf_type` codes, as stored before each value and array element type.
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// How many levels of arrays may nest (an array of scalars is one level). GGUF allows nesting;
/// llama.cpp reads none, and the limit bounds the reader's recursion on hostile input.
pub const MAX_ARRAY_DEPTH: usize = 3;

impl Value {
    /// The type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    pub(crate) fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F32(_) => type_id::F32,
            Value::F64(_) => type_id::F64,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
        }
    }

    /// The value of any integer type, widened without loss.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// "array of u32" for arrays (after their first element), the type name otherwise.
    fn describe(&self) -> String {
        match self {
            Value::Array(items) => match items.first() {
                Some(first) => format!("array of {}", first.describe()),
                None => "empty array".to_string(),
            },
            v => v.type_name().to_string(),
        }
    }

    fn wrong(&self, key: &str, expected: &'static str) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: self.describe(),
        }
    }

    pub(crate) fn to_str(&self, key: &str) -> Result<&str, GgufError> {
        match self {
            Value::String(s) => Ok(s),
            v => Err(v.wrong(key, "string")),
        }
    }

    pub(crate) fn to_integer<T: TryFrom<i128>>(&self, key: &str) -> Result<T, GgufError> {
        let v = self
            .as_integer()
            .ok_or_else(|| self.wrong(key, "integer"))?;
        T::try_from(v).map_err(|_| GgufError::ValueOutOfRange {
            key: key.to_string(),
            value: v,
        })
    }

    pub(crate) fn to_f32(&self, key: &str) -> Result<f32, GgufError> {
        match *self {
            Value::F32(v) => Ok(v),
            Value::F64(v) => Ok(v as f32),
            ref v => Err(v.wrong(key, "f32 or f64")),
        }
    }

    pub(crate) fn to_bool(&self, key: &str) -> Result<bool, GgufError> {
        match *self {
            Value::Bool(v) => Ok(v),
            ref v => Err(v.wrong(key, "bool")),
        }
    }

    pub(crate) fn to_array(&self, key: &str) -> Result<&[Value], GgufError> {
        match self {
            Value::Array(items) => Ok(items),
            v => Err(v.wrong(key, "array")),
        }
    }

    /// The elements of an array, each viewed through `elem`; `expected` names the whole.
    pub(crate) fn to_vec<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        elem: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Vec<T>, GgufError> {
        let items = self.to_array(key)?;
        items
            .iter()
            .map(|v| elem(v).ok_or_else(|| self.wrong_elem(key, expected, v)))
            .collect()
    }

    fn wrong_elem(&self, key: &str, expected: &'static str, elem: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: format!("array holding {}", elem.describe()),
        }
    }

    /// Checks that arrays are homogeneous and nest at most [`MAX_ARRAY_DEPTH`] levels, as the
    /// file format can express.
    pub(crate) fn check_encodable(&self, key: &str) -> Result<(), GgufError> {
        self.check_level(key, 0)
    }

    fn check_level(&self, key: &str, depth: usize) -> Result<(), GgufError> {
        let Value::Array(items) = self else {
            return Ok(());
        };
        if depth == MAX_ARRAY_DEPTH {
            return Err(GgufError::ArrayTooDeep {
                key: key.to_string(),
                limit: MAX_ARRAY_DEPTH,
            });
        }
        if let Some(first) = items.first() {
            if let Some(other) = items.iter().find(|v| v.type_id() != first.type_id()) {
                return Err(GgufError::MixedArray {
                    key: key.to_string(),
                    first: first.type_name(),
                    other: other.type_name(),
                });
            }
        }
        items.iter().try_for_each(|v| v.check_level(key, depth + 1))
    }
}

/// Long arrays (a vocabulary) show their first elements and their length.
const SHOWN_ITEMS: usize = 8;

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().take(SHOWN_ITEMS).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if items.len() > SHOWN_ITEMS {
                    write!(f, ", … ({} items)", items.len())?;
                }
                f.write_str("]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_convert_when_they_fit() {
        assert_eq!(Value::U64(7).to_integer::<u32>("k").unwrap(), 7);
        assert_eq!(Value::I8(3).to_integer::<u32>("k").unwrap(), 3);
        assert!(matches!(
            Value::I32(-1).to_integer::<u32>("k"),
            Err(GgufError::ValueOutOfRange { value: -1, .. })
        ));
        assert!(matches!(
            Value::U64(1 << 32).to_integer::<u32>("k"),
            Err(GgufError::ValueOutOfRange {
                value: 4_294_967_296,
                ..
            })
        ));
        assert!(matches!(
            Value::F32(1.0).to_integer::<u64>("k"),
            Err(GgufError::WrongType {
                expected: "integer",
                ..
            })
        ));
    }

    #[test]
    fn array_element_errors_name_the_element_type() {
        let v = Value::Array(vec![Value::String("a".into()), Value::U8(1)]);
        let err = v
            .to_vec("k", "array of string", |v| v.to_str("k").ok())
            .unwrap_err();
        match err {
            GgufError::WrongType { found, .. } => assert_eq!(found, "array holding u8"),
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn encodable_arrays() {
        let nest = |v: Value| Value::Array(vec![v]);
        assert!(nest(nest(nest(Value::U8(1)))).check_encodable("k").is_ok());
        assert!(matches!(
            nest(nest(nest(nest(Value::U8(1))))).check_encodable("k"),
            Err(GgufError::ArrayTooDeep { limit: 3, .. })
        ));
        assert!(matches!(
            Value::Array(vec![Value::U8(1), Value::I8(1)]).check_encodable("k"),
            Err(GgufError::MixedArray {
                first: "u8",
                other: "i8",
                ..
            })
        ));
    }

    #[test]
    fn display_shortens_long_arrays() {
        let v = Value::Array((0..10).map(Value::U32).collect());
        assert_eq!(v.to_string(), "[0, 1, 2, 3, 4, 5, 6, 7, … (10 items)]");
        assert_eq!(Value::String("a\"b".into()).to_string(), "\"a\\\"b\"");
    }
}
