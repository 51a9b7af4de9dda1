//! The class-file model (JVMS 4.1) with its reader and writer. Attributes stay as raw bytes
//! until a pass asks for a method's code (see [`crate::code`]), so an unmodified read → write
//! is byte-identical.

use crate::bytes::{Cursor, put_u2, put_u4};
use crate::constant_pool::ConstantPool;
use crate::error::{Error, RawError, RawResult, Result};

/// An attribute kept as its name index and exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    pub name_index: u16,
    pub data: Vec<u8>,
    /// Absolute offset of `data` in the class file that was read (0 for new attributes).
    pub offset: usize,
}

/// A field or a method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub access: u16,
    pub name_index: u16,
    pub descriptor_index: u16,
    pub attributes: Vec<Attribute>,
}

/// A whole class file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassFile {
    pub minor: u16,
    pub major: u16,
    pub constant_pool: ConstantPool,
    pub access: u16,
    pub this_class: u16,
    pub super_class: u16,
    pub interfaces: Vec<u16>,
    pub fields: Vec<Member>,
    pub methods: Vec<Member>,
    pub attributes: Vec<Attribute>,
}

pub const ACC_STATIC: u16 = 0x0008;
pub const ACC_NATIVE: u16 = 0x0100;
pub const ACC_INTERFACE: u16 = 0x0200;
pub const ACC_ABSTRACT: u16 = 0x0400;
pub const ACC_MODULE: u16 = 0x8000;

impl ClassFile {
    /// Parses a class file; errors name the class (once known), the offset and the problem.
    pub fn read(data: &[u8]) -> Result<ClassFile> {
        let mut name = String::from("<unknown>");
        Self::read_inner(data, &mut name).map_err(|e| e.in_class(&name))
    }

    fn read_inner(data: &[u8], name: &mut String) -> RawResult<ClassFile> {
        let mut c = Cursor::new(data, 0);
        if c.u4("magic")? != 0xCAFE_BABE {
            return Err(RawError::new(0, "bad magic (not a class file)"));
        }
        let minor = c.u2("minor_version")?;
        let major = c.u2("major_version")?;
        let constant_pool = ConstantPool::read(&mut c)?;
        let access = c.u2("access_flags")?;
        let this_at = c.offset();
        let this_class = c.u2("this_class")?;
        *name = constant_pool.class_name(this_class).ok_or_else(|| {
            RawError::new(
                this_at,
                format!("this_class #{this_class} is not a Class constant"),
            )
        })?;
        let super_at = c.offset();
        let super_class = c.u2("super_class")?;
        if super_class != 0 && constant_pool.class_name(super_class).is_none() {
            return Err(RawError::new(
                super_at,
                format!("super_class #{super_class} is not a Class constant"),
            ));
        }
        let n = c.u2("interfaces_count")?;
        let mut interfaces = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let at = c.offset();
            let i = c.u2("interface")?;
            if constant_pool.class_name(i).is_none() {
                return Err(RawError::new(
                    at,
                    format!("interface #{i} is not a Class constant"),
                ));
            }
            interfaces.push(i);
        }
        let fields = read_members(&mut c, &constant_pool, "field")?;
        let methods = read_members(&mut c, &constant_pool, "method")?;
        let attributes = read_attributes(&mut c, &constant_pool)?;
        if c.remaining() != 0 {
            return Err(c.err(format!("{} extra bytes after the class", c.remaining())));
        }
        Ok(ClassFile {
            minor,
            major,
            constant_pool,
            access,
            this_class,
            super_class,
            interfaces,
            fields,
            methods,
            attributes,
        })
    }

    /// Serializes the class.
    pub fn write(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        put_u4(&mut out, 0xCAFE_BABE);
        put_u2(&mut out, self.minor);
        put_u2(&mut out, self.major);
        self.constant_pool.write(&mut out);
        put_u2(&mut out, self.access);
        put_u2(&mut out, self.this_class);
        put_u2(&mut out, self.super_class);
        put_u2(&mut out, self.interfaces.len() as u16);
        for i in &self.interfaces {
            put_u2(&mut out, *i);
        }
        for list in [&self.fields, &self.methods] {
            put_u2(&mut out, list.len() as u16);
            for m in list {
                put_u2(&mut out, m.access);
                put_u2(&mut out, m.name_index);
                put_u2(&mut out, m.descriptor_index);
                write_attributes(&mut out, &m.attributes);
            }
        }
        write_attributes(&mut out, &self.attributes);
        out
    }

    /// The internal name of this class.
    pub fn name(&self) -> String {
        self.constant_pool
            .class_name(self.this_class)
            .unwrap_or_default()
    }
    pub fn super_name(&self) -> Option<String> {
        self.constant_pool.class_name(self.super_class)
    }
    pub fn member_name(&self, m: &Member) -> String {
        self.constant_pool.utf8(m.name_index).unwrap_or_default()
    }
    pub fn member_descriptor(&self, m: &Member) -> String {
        self.constant_pool
            .utf8(m.descriptor_index)
            .unwrap_or_default()
    }
    /// Position of the attribute called `name` in `attrs`.
    pub fn find_attribute(&self, attrs: &[Attribute], name: &str) -> Option<usize> {
        let enc = crate::mutf8::encode(name);
        attrs
            .iter()
            .position(|a| self.constant_pool.utf8_bytes(a.name_index) == Some(&enc[..]))
    }
    pub(crate) fn error(&self, offset: usize, what: impl Into<String>) -> Error {
        Error {
            class: self.name(),
            offset,
            what: what.into(),
        }
    }
}

fn read_members(c: &mut Cursor, cp: &ConstantPool, kind: &str) -> RawResult<Vec<Member>> {
    let n = c.u2(&format!("{kind}s_count"))?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let at = c.offset();
        let access = c.u2(&format!("{kind} access_flags"))?;
        let name_index = c.u2(&format!("{kind} name_index"))?;
        let descriptor_index = c.u2(&format!("{kind} descriptor_index"))?;
        if cp.utf8_bytes(name_index).is_none() || cp.utf8_bytes(descriptor_index).is_none() {
            return Err(RawError::new(
                at,
                format!("{kind} name or descriptor is not a Utf8 constant"),
            ));
        }
        let attributes = read_attributes(c, cp)?;
        v.push(Member {
            access,
            name_index,
            descriptor_index,
            attributes,
        });
    }
    Ok(v)
}

pub(crate) fn read_attributes(c: &mut Cursor, cp: &ConstantPool) -> RawResult<Vec<Attribute>> {
    let n = c.u2("attributes_count")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let at = c.offset();
        let name_index = c.u2("attribute_name_index")?;
        if cp.utf8_bytes(name_index).is_none() {
            return Err(RawError::new(
                at,
                format!("attribute name #{name_index} is not a Utf8 constant"),
            ));
        }
        let len = c.u4("attribute_length")?;
        let offset = c.offset();
        let data = c.bytes(len as usize, "attribute body")?.to_vec();
        v.push(Attribute {
            name_index,
            data,
            offset,
        });
    }
    Ok(v)
}

pub(crate) fn write_attributes(out: &mut Vec<u8>, attrs: &[Attribute]) {
    put_u2(out, attrs.len() as u16);
    for a in attrs {
        put_u2(out, a.name_index);
        put_u4(out, a.data.len() as u32);
        out.extend_from_slice(&a.data);
    }
}
