//! Values decoded by the metadata: any field of any event or constant, as a small tree.
//! Constant-pool fields stay references; the reader resolves the few it needs.

use super::bytes::{Cursor, FORMAT, Str};
use super::metadata::{Metadata, Primitive};
use crate::error::{Error, Result};

/// How deeply structs may nest inside one value (a stack trace is 3 levels: trace, frames,
/// frame); deeper means a class that contains itself.
const MAX_DEPTH: usize = 16;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Str),
    /// A key into the constant pool of type `ty`.
    Ref {
        ty: u64,
        key: i64,
    },
    Array(Vec<Value>),
    /// The fields of a struct, in the metadata's order.
    Struct(Vec<Value>),
}

impl Value {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Bool(b) => Some(i64::from(*b)),
            Value::Float(f) => Some(*f as i64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(v) => Some(*v != 0),
            _ => None,
        }
    }

    pub fn as_ref_key(&self) -> Option<i64> {
        match self {
            Value::Ref { key, .. } => Some(*key),
            _ => None,
        }
    }
}

/// Decodes one value of class `ty` (not through a constant pool).
///
/// At most 32 values per byte are made (plus a few), so that arrays of structs without fields,
/// which take no bytes, cannot make a small file decode into billions of values.
pub(super) fn read(meta: &Metadata, ty: u64, c: &mut Cursor) -> Result<Value> {
    let mut budget = c.remaining().saturating_mul(32).saturating_add(64);
    read_at(meta, ty, c, 0, &mut budget)
}

fn read_at(
    meta: &Metadata,
    ty: u64,
    c: &mut Cursor,
    depth: usize,
    budget: &mut usize,
) -> Result<Value> {
    let at = c.pos;
    if *budget == 0 {
        return Err(Error::invalid(
            FORMAT,
            format!("value at byte {at} holds more items than its bytes can"),
        ));
    }
    *budget -= 1;
    let Some(class) = meta.classes.get(&ty) else {
        return Err(Error::invalid(
            FORMAT,
            format!("value at byte {at} has type {ty}, which the metadata does not define"),
        ));
    };
    if let Some(p) = class.primitive {
        let what = class.name.as_str();
        return Ok(match p {
            Primitive::Boolean => Value::Bool(c.u8(what)? != 0),
            Primitive::Byte => Value::Int(i64::from(c.u8(what)? as i8)),
            Primitive::Char => Value::Int(c.varint(what)? as u16 as i64),
            Primitive::Short => Value::Int(i64::from(c.varint(what)? as i16)),
            Primitive::Int => Value::Int(i64::from(c.varint(what)? as i32)),
            Primitive::Long => Value::Int(c.varlong(what)?),
            Primitive::Float => Value::Float(f64::from(f32::from_bits(c.be_u32(what)?))),
            Primitive::Double => Value::Float(f64::from_bits(c.be_u64(what)?)),
            Primitive::String => Value::Str(c.string(what)?),
        });
    }
    if depth >= MAX_DEPTH {
        return Err(Error::invalid(
            FORMAT,
            format!(
                "value of {} at byte {at} nests more than {MAX_DEPTH} structs deep",
                class.name
            ),
        ));
    }
    let mut fields = Vec::with_capacity(class.fields.len());
    for f in &class.fields {
        let mut one = |c: &mut Cursor| -> Result<Value> {
            if f.constant_pool {
                *budget = budget.saturating_sub(1);
                Ok(Value::Ref {
                    ty: f.type_id,
                    key: c.varlong(&f.name)?,
                })
            } else {
                read_at(meta, f.type_id, c, depth + 1, budget)
            }
        };
        fields.push(if f.array {
            let n = c.count(&f.name)?;
            let mut items = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                items.push(one(c)?);
            }
            Value::Array(items)
        } else {
            one(c)?
        });
    }
    Ok(Value::Struct(fields))
}
