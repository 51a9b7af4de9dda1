//! The metadata event of a chunk: the classes (event types, constant-pool types, primitives)
//! with their fields, from the element tree (`root` → `metadata` → `class` → `field`).

use super::bytes::{Cursor, FORMAT, Str};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// How deep the element tree may nest (the JDK's is 5 levels deep).
const MAX_ELEMENT_DEPTH: usize = 32;

#[derive(Clone, Debug)]
pub(super) struct Field {
    pub name: String,
    pub type_id: u64,
    /// `dimension="1"`: an array of the type.
    pub array: bool,
    /// `constantPool="true"`: stored as a key into the type's constant pool.
    pub constant_pool: bool,
}

/// The built-in types, decoded by name rather than by fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Primitive {
    Boolean,
    Byte,
    Char,
    Short,
    Int,
    Long,
    Float,
    Double,
    String,
}

impl Primitive {
    fn of(name: &str) -> Option<Primitive> {
        Some(match name {
            "boolean" => Primitive::Boolean,
            "byte" => Primitive::Byte,
            "char" => Primitive::Char,
            "short" => Primitive::Short,
            "int" => Primitive::Int,
            "long" => Primitive::Long,
            "float" => Primitive::Float,
            "double" => Primitive::Double,
            "java.lang.String" => Primitive::String,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(super) struct Class {
    pub name: String,
    pub primitive: Option<Primitive>,
    pub fields: Vec<Field>,
}

impl Class {
    /// The index of the field named `name`.
    pub fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

#[derive(Debug, Default)]
pub(super) struct Metadata {
    pub classes: HashMap<u64, Class>,
    /// Type ids by class name; the last class of a name wins (annotations such as
    /// `jdk.jfr.StackTrace` never share a name with the `jdk.types.*` ones we look up).
    pub by_name: HashMap<String, u64>,
}

impl Metadata {
    pub fn id(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied()
    }
}

/// One element of the tree, its strings as indices into the string table.
struct Element {
    name: usize,
    attributes: Vec<(usize, usize)>,
    children: Vec<Element>,
}

/// Parses the metadata event at byte `at`, whose body (after size and type id) starts at `c`.
pub(super) fn read(c: &mut Cursor, at: usize) -> Result<Metadata> {
    c.varlong("the metadata start time")?;
    c.varlong("the metadata duration")?;
    c.varlong("the metadata id")?;
    let n = c.count("the metadata string count")?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let at = c.pos;
        strings.push(match c.string("a metadata string")? {
            Str::Text(s) => s,
            Str::Null => String::new(),
            Str::Ref(_) => {
                return Err(Error::invalid(
                    FORMAT,
                    format!("the metadata string at byte {at} refers to a constant pool"),
                ));
            }
        });
    }
    let root = element(c, &strings, 0)?;
    let s = |i: usize| strings[i].as_str();
    let mut meta = Metadata::default();
    for m in root.children.iter().filter(|e| s(e.name) == "metadata") {
        for class in m.children.iter().filter(|e| s(e.name) == "class") {
            let attr = |e: &Element, key: &str| {
                e.attributes
                    .iter()
                    .find(|(k, _)| s(*k) == key)
                    .map(|(_, v)| s(*v))
            };
            let name = attr(class, "name").unwrap_or_default().to_string();
            let Some(id) = attr(class, "id").and_then(|v| v.parse::<u64>().ok()) else {
                return Err(Error::invalid(
                    FORMAT,
                    format!("metadata class {name:?} has no numeric id (metadata at byte {at})"),
                ));
            };
            let mut fields = Vec::new();
            for f in class.children.iter().filter(|e| s(e.name) == "field") {
                let fname = attr(f, "name").unwrap_or_default().to_string();
                let Some(type_id) = attr(f, "class").and_then(|v| v.parse::<u64>().ok()) else {
                    return Err(Error::invalid(
                        FORMAT,
                        format!(
                            "field {fname:?} of metadata class {name:?} has no numeric type \
                             (metadata at byte {at})"
                        ),
                    ));
                };
                fields.push(Field {
                    name: fname,
                    type_id,
                    array: attr(f, "dimension").is_some_and(|d| d != "0"),
                    constant_pool: attr(f, "constantPool") == Some("true"),
                });
            }
            meta.by_name.insert(name.clone(), id);
            meta.classes.insert(
                id,
                Class {
                    primitive: Primitive::of(&name),
                    name,
                    fields,
                },
            );
        }
    }
    // Every field's type must be a class of this metadata.
    for class in meta.classes.values() {
        for f in &class.fields {
            if !meta.classes.contains_key(&f.type_id) {
                return Err(Error::invalid(
                    FORMAT,
                    format!(
                        "field {:?} of metadata class {:?} has type {}, which is not defined \
                         (metadata at byte {at})",
                        f.name, class.name, f.type_id
                    ),
                ));
            }
        }
    }
    Ok(meta)
}

fn element(c: &mut Cursor, strings: &[String], depth: usize) -> Result<Element> {
    let at = c.pos;
    if depth > MAX_ELEMENT_DEPTH {
        return Err(Error::invalid(
            FORMAT,
            format!("metadata element at byte {at} is nested more than {MAX_ELEMENT_DEPTH} deep"),
        ));
    }
    let index = |c: &mut Cursor| -> Result<usize> {
        let at = c.pos;
        let i = c.varint("a metadata string index")?;
        if i >= strings.len() as u64 {
            return Err(Error::invalid(
                FORMAT,
                format!(
                    "metadata string index {i} at byte {at} is past the {} strings",
                    strings.len()
                ),
            ));
        }
        Ok(i as usize)
    };
    let name = index(c)?;
    let n = c.count("a metadata attribute count")?;
    let mut attributes = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        attributes.push((index(c)?, index(c)?));
    }
    let n = c.count("a metadata child count")?;
    let mut children = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        children.push(element(c, strings, depth + 1)?);
    }
    Ok(Element {
        name,
        attributes,
        children,
    })
}
