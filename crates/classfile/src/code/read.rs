//! Reading: a method's Code attribute (instructions, exception table, LineNumberTable,
//! LocalVariable(Type)Table, StackMapTable, type annotations) into the label IR.

use std::collections::BTreeMap;

use super::descriptor::initial_frame;
use super::{
    Code, CodeAttr, CodeAttrBody, Frame, Handler, Insn, Label, LocalVar, TypeAnnotation,
    TypeTarget, VType, pad,
};
use crate::bytes::Cursor;
use crate::class::{ClassFile, read_attributes};
use crate::constant_pool::ConstantPool;
use crate::error::{RawError, RawResult, Result};
use crate::opcodes::*;

/// Labels created on read, one per referenced offset.
struct Labels {
    by_offset: BTreeMap<u32, Label>,
    next: u32,
}

impl Labels {
    fn at(&mut self, off: u32) -> Label {
        let next = &mut self.next;
        *self.by_offset.entry(off).or_insert_with(|| {
            *next += 1;
            Label(*next - 1)
        })
    }
}

fn rel(at: usize, delta: i32) -> RawResult<u32> {
    let t = at as i64 + i64::from(delta);
    u32::try_from(t).map_err(|_| RawError::new(at, format!("branch target {t} is negative")))
}

impl Code {
    /// Reads method `index`'s Code attribute into the IR; `Ok(None)` if it has none.
    pub fn read(cf: &ClassFile, index: usize) -> Result<Option<Code>> {
        let name = cf.name();
        let Some(m) = cf.methods.get(index) else {
            return Err(cf.error(0, format!("no method #{index}")));
        };
        let Some(ai) = cf.find_attribute(&m.attributes, "Code") else {
            return Ok(None);
        };
        let attr = m.attributes[ai].clone();
        let mname = cf.member_name(m);
        let desc = cf.member_descriptor(m);
        let access = m.access;
        let (initial_locals, placeholders) =
            initial_frame(&cf.constant_pool, cf.this_class, access, &mname, &desc)
                .map_err(|e| e.in_class(&name))?;
        let major = cf.major;
        Self::parse(
            &cf.constant_pool,
            &attr.data,
            attr.offset,
            initial_locals,
            major,
        )
        .map(|mut c| {
            c.placeholders = placeholders;
            Some(c)
        })
        .map_err(|e| {
            let mut e = e.in_class(&name);
            e.what = format!("method {mname}{desc}: {}", e.what);
            e
        })
    }

    fn parse(
        cp: &ConstantPool,
        data: &[u8],
        base: usize,
        initial_locals: Vec<VType>,
        major: u16,
    ) -> RawResult<Code> {
        let mut c = Cursor::new(data, base);
        let max_stack = c.u2("max_stack")?;
        let max_locals = c.u2("max_locals")?;
        let code_len = c.u4("code_length")? as usize;
        let code_base = c.offset();
        let code = c.bytes(code_len, "code")?;
        if code_len == 0 || code_len > 65535 {
            return Err(RawError::new(
                code_base,
                format!("code_length {code_len} out of range"),
            ));
        }
        let mut labels = Labels {
            by_offset: BTreeMap::new(),
            next: 0,
        };
        let decoded = decode_insns(code, code_base, &mut labels)?;
        let mut boundary = vec![false; code_len + 1];
        for (off, _) in &decoded {
            boundary[*off as usize] = true;
        }
        boundary[code_len] = true;

        let n = c.u2("exception_table_length")?;
        let mut handlers = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let start = c.u2("start_pc")?;
            let end = c.u2("end_pc")?;
            let h = c.u2("handler_pc")?;
            let catch_type = c.u2("catch_type")?;
            if start >= end || usize::from(end) > code_len || usize::from(h) >= code_len {
                return Err(c.err(format!("bad exception range {start}..{end} -> {h}")));
            }
            if catch_type != 0 && cp.class_name(catch_type).is_none() {
                return Err(c.err(format!("catch_type #{catch_type} is not a Class constant")));
            }
            handlers.push(Handler {
                start: labels.at(u32::from(start)),
                end: labels.at(u32::from(end)),
                handler: labels.at(u32::from(h)),
                catch_type,
            });
        }
        let raw_attrs = read_attributes(&mut c, cp)?;
        if c.remaining() != 0 {
            return Err(c.err("extra bytes at the end of the Code attribute"));
        }
        let mut attributes = Vec::new();
        for a in raw_attrs {
            let name = cp.utf8_bytes(a.name_index).unwrap_or_default();
            let mut ac = Cursor::new(&a.data, a.offset);
            let body = match name {
                b"LineNumberTable" => {
                    CodeAttrBody::LineNumbers(read_line_numbers(&mut ac, &mut labels)?)
                }
                b"LocalVariableTable" => {
                    CodeAttrBody::LocalVariables(read_local_vars(&mut ac, &mut labels)?)
                }
                b"LocalVariableTypeTable" => {
                    CodeAttrBody::LocalVariableTypes(read_local_vars(&mut ac, &mut labels)?)
                }
                b"StackMapTable" => CodeAttrBody::StackMap(read_frames(
                    &mut ac,
                    cp,
                    &mut labels,
                    &initial_locals,
                    code,
                    code_len,
                )?),
                b"RuntimeVisibleTypeAnnotations" | b"RuntimeInvisibleTypeAnnotations" => {
                    CodeAttrBody::TypeAnnotations(read_type_annotations(&mut ac, &mut labels)?)
                }
                _ => CodeAttrBody::Other(a.data.clone()),
            };
            if !matches!(body, CodeAttrBody::Other(_)) && ac.remaining() != 0 {
                return Err(ac.err("extra bytes at the end of the attribute"));
            }
            attributes.push(CodeAttr {
                name_index: a.name_index,
                body,
            });
        }
        // Every label must sit on an instruction boundary (or the end of the code).
        for &off in labels.by_offset.keys() {
            if !boundary.get(off as usize).copied().unwrap_or(false) {
                return Err(RawError::new(
                    code_base,
                    format!("code offset {off} is not an instruction boundary"),
                ));
            }
        }
        let mut insns = Vec::with_capacity(decoded.len() + labels.by_offset.len());
        for (off, insn) in decoded {
            if let Some(l) = labels.by_offset.get(&off) {
                insns.push(Insn::Label(*l));
            }
            insns.push(insn);
        }
        if let Some(l) = labels.by_offset.get(&(code_len as u32)) {
            insns.push(Insn::Label(*l));
        }
        Ok(Code {
            max_stack,
            max_locals,
            insns,
            handlers,
            attributes,
            initial_locals,
            major,
            placeholders: Vec::new(),
            next_label: labels.next,
        })
    }
}

/// Decodes the code array; branch targets become labels (checked against boundaries later).
fn decode_insns(code: &[u8], base: usize, labels: &mut Labels) -> RawResult<Vec<(u32, Insn)>> {
    let mut c = Cursor::new(code, base);
    let mut out = Vec::with_capacity(code.len() / 2);
    while c.remaining() > 0 {
        let at = c.pos();
        let op = c.u1("opcode")?;
        let insn = match op {
            0x00..=0x0f
            | 0x1a..=0x35
            | 0x3b..=0x83
            | 0x85..=0x98
            | 0xac..=0xb1
            | 0xbe
            | 0xbf
            | 0xc2
            | 0xc3 => Insn::Simple(op),
            0x10 => Insn::Bipush(c.u1("bipush")? as i8),
            0x11 => Insn::Sipush(c.u2("sipush")? as i16),
            LDC => Insn::Ldc {
                op,
                index: u16::from(c.u1("ldc")?),
            },
            LDC_W | LDC2_W => Insn::Ldc {
                op,
                index: c.u2("ldc_w")?,
            },
            0x15..=0x19 | 0x36..=0x3a | RET => Insn::Local {
                op,
                index: u16::from(c.u1("local index")?),
            },
            IINC => Insn::Iinc {
                index: u16::from(c.u1("iinc")?),
                delta: i16::from(c.u1("iinc")? as i8),
            },
            0x99..=0xa8 | IFNULL | IFNONNULL => {
                let d = i32::from(c.u2("branch offset")? as i16);
                Insn::Jump {
                    op,
                    target: labels.at(rel(at, d)?),
                }
            }
            GOTO_W | JSR_W => {
                let d = c.i4("branch offset")?;
                Insn::Jump {
                    op: if op == GOTO_W { GOTO } else { JSR },
                    target: labels.at(rel(at, d)?),
                }
            }
            TABLESWITCH | LOOKUPSWITCH => {
                c.skip(pad(at as u32), "switch padding")?;
                let default = labels.at(rel(at, c.i4("switch default")?)?);
                if op == TABLESWITCH {
                    let low = c.i4("tableswitch low")?;
                    let high = c.i4("tableswitch high")?;
                    let n = i64::from(high) - i64::from(low) + 1;
                    if n < 1 || n as usize * 4 > c.remaining() {
                        return Err(
                            c.err(format!("tableswitch low {low} high {high} is impossible"))
                        );
                    }
                    let mut targets = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        targets.push(labels.at(rel(at, c.i4("tableswitch target")?)?));
                    }
                    Insn::TableSwitch {
                        default,
                        low,
                        targets,
                    }
                } else {
                    let n = c.i4("lookupswitch npairs")?;
                    if n < 0 || n as usize * 8 > c.remaining() {
                        return Err(c.err(format!("lookupswitch npairs {n} is impossible")));
                    }
                    let mut pairs = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        let k = c.i4("lookupswitch key")?;
                        pairs.push((k, labels.at(rel(at, c.i4("lookupswitch target")?)?)));
                    }
                    Insn::LookupSwitch { default, pairs }
                }
            }
            0xb2..=0xb8 | NEW | 0xbd | 0xc0 | 0xc1 => Insn::Ref {
                op,
                index: c.u2("constant index")?,
            },
            0xb9 => {
                let index = c.u2("invokeinterface")?;
                let count = c.u1("invokeinterface count")?;
                c.u1("invokeinterface zero")?;
                Insn::InvokeInterface { index, count }
            }
            0xba => {
                let index = c.u2("invokedynamic")?;
                c.u2("invokedynamic zeros")?;
                Insn::InvokeDynamic { index }
            }
            0xbc => Insn::NewArray(c.u1("newarray type")?),
            0xc5 => Insn::MultiANewArray {
                index: c.u2("multianewarray")?,
                dims: c.u1("multianewarray dims")?,
            },
            WIDE => {
                let op2 = c.u1("wide opcode")?;
                match op2 {
                    0x15..=0x19 | 0x36..=0x3a | RET => Insn::Local {
                        op: op2,
                        index: c.u2("wide index")?,
                    },
                    IINC => Insn::Iinc {
                        index: c.u2("wide iinc")?,
                        delta: c.u2("wide iinc")? as i16,
                    },
                    _ => {
                        return Err(RawError::new(
                            base + at,
                            format!("wide before opcode {op2:#04x}"),
                        ));
                    }
                }
            }
            _ => {
                return Err(RawError::new(
                    base + at,
                    format!("unknown opcode {op:#04x}"),
                ));
            }
        };
        out.push((at as u32, insn));
    }
    Ok(out)
}

fn read_line_numbers(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<(Label, u16)>> {
    let n = c.u2("line_number_table_length")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let pc = c.u2("start_pc")?;
        v.push((labels.at(u32::from(pc)), c.u2("line_number")?));
    }
    Ok(v)
}

fn read_local_vars(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<LocalVar>> {
    let n = c.u2("local_variable_table_length")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let start = u32::from(c.u2("start_pc")?);
        let len = u32::from(c.u2("length")?);
        v.push(LocalVar {
            start: labels.at(start),
            end: labels.at(start + len),
            name_index: c.u2("name_index")?,
            descriptor_index: c.u2("descriptor_index")?,
            index: c.u2("index")?,
        });
    }
    Ok(v)
}

fn read_vtype(
    c: &mut Cursor,
    cp: &ConstantPool,
    labels: &mut Labels,
    code: &[u8],
) -> RawResult<VType> {
    let at = c.offset();
    Ok(match c.u1("verification type")? {
        0 => VType::Top,
        1 => VType::Integer,
        2 => VType::Float,
        3 => VType::Double,
        4 => VType::Long,
        5 => VType::Null,
        6 => VType::UninitializedThis,
        7 => {
            let i = c.u2("Object_variable_info")?;
            if cp.class_name(i).is_none() {
                return Err(RawError::new(
                    at,
                    format!("frame type #{i} is not a Class constant"),
                ));
            }
            VType::Object(i)
        }
        8 => {
            let o = c.u2("Uninitialized_variable_info")?;
            if code.get(usize::from(o)) != Some(&NEW) {
                return Err(RawError::new(
                    at,
                    format!("Uninitialized({o}) does not point at a new instruction"),
                ));
            }
            VType::Uninitialized(labels.at(u32::from(o)))
        }
        t => {
            return Err(RawError::new(
                at,
                format!("unknown verification type tag {t}"),
            ));
        }
    })
}

fn read_frames(
    c: &mut Cursor,
    cp: &ConstantPool,
    labels: &mut Labels,
    initial: &[VType],
    code: &[u8],
    code_len: usize,
) -> RawResult<Vec<Frame>> {
    let n = c.u2("number_of_entries")?;
    let mut v: Vec<Frame> = Vec::with_capacity(usize::from(n));
    let mut locals: Vec<VType> = initial.to_vec();
    let mut offset: i64 = -1;
    for _ in 0..n {
        let at = c.offset();
        let t = c.u1("frame_type")?;
        let (delta, stack) = match t {
            0..=63 => (u16::from(t), vec![]),
            64..=127 => (u16::from(t - 64), vec![read_vtype(c, cp, labels, code)?]),
            247 => {
                let d = c.u2("offset_delta")?;
                (d, vec![read_vtype(c, cp, labels, code)?])
            }
            248..=250 => {
                let d = c.u2("offset_delta")?;
                let k = usize::from(251 - t);
                if k > locals.len() {
                    return Err(RawError::new(
                        at,
                        format!("chop_frame removes {k} of {} locals", locals.len()),
                    ));
                }
                locals.truncate(locals.len() - k);
                (d, vec![])
            }
            251 => (c.u2("offset_delta")?, vec![]),
            252..=254 => {
                let d = c.u2("offset_delta")?;
                for _ in 0..(t - 251) {
                    locals.push(read_vtype(c, cp, labels, code)?);
                }
                (d, vec![])
            }
            255 => {
                let d = c.u2("offset_delta")?;
                let nl = c.u2("number_of_locals")?;
                locals.clear();
                for _ in 0..nl {
                    locals.push(read_vtype(c, cp, labels, code)?);
                }
                let ns = c.u2("number_of_stack_items")?;
                let mut stack = Vec::with_capacity(usize::from(ns).min(256));
                for _ in 0..ns {
                    stack.push(read_vtype(c, cp, labels, code)?);
                }
                (d, stack)
            }
            _ => return Err(RawError::new(at, format!("reserved frame_type {t}"))),
        };
        offset = offset + 1 + i64::from(delta);
        if offset as usize >= code_len {
            return Err(RawError::new(
                at,
                format!("frame offset {offset} beyond the code"),
            ));
        }
        v.push(Frame {
            label: labels.at(offset as u32),
            locals: locals.clone(),
            stack,
        });
    }
    Ok(v)
}

fn skip_element_value(c: &mut Cursor, depth: u32) -> RawResult<()> {
    if depth > 64 {
        return Err(c.err("annotation nested too deeply"));
    }
    match c.u1("element_value tag")? {
        b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' | b's' | b'c' => {
            c.skip(2, "const_value_index")
        }
        b'e' => c.skip(4, "enum_const_value"),
        b'@' => skip_annotation(c, depth + 1),
        b'[' => {
            let n = c.u2("num_values")?;
            for _ in 0..n {
                skip_element_value(c, depth + 1)?;
            }
            Ok(())
        }
        t => Err(c.err(format!("unknown element_value tag {t}"))),
    }
}

fn skip_annotation(c: &mut Cursor, depth: u32) -> RawResult<()> {
    c.skip(2, "annotation type_index")?;
    let n = c.u2("num_element_value_pairs")?;
    for _ in 0..n {
        c.skip(2, "element_name_index")?;
        skip_element_value(c, depth)?;
    }
    Ok(())
}

fn read_type_annotations(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<TypeAnnotation>> {
    let n = c.u2("num_annotations")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let at = c.offset();
        let tt = c.u1("target_type")?;
        let target = match tt {
            0x40 | 0x41 => {
                let k = c.u2("table_length")?;
                let mut table = Vec::with_capacity(usize::from(k));
                for _ in 0..k {
                    let s = u32::from(c.u2("start_pc")?);
                    let l = u32::from(c.u2("length")?);
                    table.push((labels.at(s), labels.at(s + l), c.u2("index")?));
                }
                TypeTarget::LocalVar(tt, table)
            }
            0x42 => TypeTarget::Catch(c.u2("exception_table_index")?),
            0x43..=0x46 => TypeTarget::Offset(tt, labels.at(u32::from(c.u2("offset")?))),
            0x47..=0x4b => {
                let o = u32::from(c.u2("offset")?);
                TypeTarget::TypeArgument(tt, labels.at(o), c.u1("type_argument_index")?)
            }
            _ => {
                return Err(RawError::new(
                    at,
                    format!("target_type {tt:#04x} cannot appear in Code"),
                ));
            }
        };
        let rest_start = c.pos();
        let path_len = c.u1("type_path length")?;
        c.skip(usize::from(path_len) * 2, "type_path")?;
        skip_annotation(c, 0)?;
        let rest = c.data()[rest_start..c.pos()].to_vec();
        v.push(TypeAnnotation { target, rest });
    }
    Ok(v)
}
