//! The HPROF 1.0.x reader: one forward pass over a file, handing each record to a [`Visitor`].
//!
//! The format (the JDK's `heapDumper.cpp` and the HPROF agent's `manual.html`): a header
//! `JAVA PROFILE 1.0.x\0`, the identifier size (u4) and a timestamp (u8), then records of
//! `tag u1, time u4, length u4, body`. Heap contents sit in HEAP DUMP (0x0C) and HEAP DUMP
//! SEGMENT (0x1C) records as sub-records (GC roots, class, instance and array dumps). The reader
//! never holds more than one record's body and never allocates by a length it has not checked
//! against the bytes that remain; every error names the record and its byte offset.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// HPROF basic types (the `type` byte of fields, statics and primitive arrays).
pub mod ty {
    pub const OBJECT: u8 = 2;
    pub const BOOLEAN: u8 = 4;
    pub const CHAR: u8 = 5;
    pub const FLOAT: u8 = 6;
    pub const DOUBLE: u8 = 7;
    pub const BYTE: u8 = 8;
    pub const SHORT: u8 = 9;
    pub const INT: u8 = 10;
    pub const LONG: u8 = 11;
}

/// Bytes a value of basic type `t` takes in the dump (objects take the identifier size).
pub fn value_size(t: u8, id_size: u32) -> Option<u32> {
    Some(match t {
        ty::OBJECT => id_size,
        ty::BOOLEAN | ty::BYTE => 1,
        ty::CHAR | ty::SHORT => 2,
        ty::FLOAT | ty::INT => 4,
        ty::DOUBLE | ty::LONG => 8,
        _ => return None,
    })
}

/// The Java name of a primitive array type (`byte[]`).
pub fn primitive_array_name(t: u8) -> &'static str {
    match t {
        ty::BOOLEAN => "boolean[]",
        ty::CHAR => "char[]",
        ty::FLOAT => "float[]",
        ty::DOUBLE => "double[]",
        ty::BYTE => "byte[]",
        ty::SHORT => "short[]",
        ty::INT => "int[]",
        ty::LONG => "long[]",
        _ => "?[]",
    }
}

/// A GC root and what the dump says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Unknown,
    JniGlobal,
    JniLocal { thread: u32, depth: u32 },
    JavaFrame { thread: u32, depth: u32 },
    NativeStack { thread: u32 },
    StickyClass,
    ThreadBlock { thread: u32 },
    MonitorUsed,
    ThreadObject { thread: u32, trace: u32 },
}

/// A STACK FRAME record.
#[derive(Clone, Copy, Debug)]
pub struct FrameRecord {
    pub id: u64,
    pub method_name: u64,
    pub signature: u64,
    pub source_file: u64,
    pub class_serial: u32,
    pub line: i32,
}

/// A CLASS DUMP sub-record (constant pool entries are skipped).
#[derive(Clone, Debug, Default)]
pub struct ClassDump {
    pub id: u64,
    pub super_id: u64,
    pub loader_id: u64,
    pub instance_size: u32,
    /// (name string id, basic type, value: an object id or the raw bits).
    pub statics: Vec<(u64, u8, u64)>,
    /// (name string id, basic type) of this class's own instance fields, in dump order.
    pub fields: Vec<(u64, u8)>,
}

/// What a pass wants from the file. Each method has a no-op default.
pub trait Visitor {
    /// Whether instance field bytes and object array elements are read (else skipped).
    fn wants_contents(&self) -> bool {
        false
    }
    /// Whether primitive array contents are read (else skipped).
    fn wants_primitives(&self) -> bool {
        false
    }
    fn utf8(&mut self, _id: u64, _text: &[u8]) {}
    fn load_class(&mut self, _serial: u32, _class_id: u64, _name_id: u64) {}
    fn frame(&mut self, _frame: FrameRecord) {}
    fn trace(&mut self, _serial: u32, _thread_serial: u32, _frames: Vec<u64>) {}
    fn root(&mut self, _id: u64, _root: Root) {}
    fn class_dump(&mut self, _offset: u64, _class: ClassDump) {}
    /// An instance; `fields` holds its field bytes when [`Visitor::wants_contents`].
    fn instance(&mut self, _offset: u64, _id: u64, _class_id: u64, _size: u32, _fields: &[u8]) {}
    /// An object array; `elements` holds its element ids when [`Visitor::wants_contents`].
    fn object_array(&mut self, _offset: u64, _id: u64, _class_id: u64, _n: u32, _elements: &[u8]) {}
    /// A primitive array; `data` holds its bytes when [`Visitor::wants_primitives`].
    fn primitive_array(&mut self, _offset: u64, _id: u64, _ty: u8, _n: u32, _data: &[u8]) {}
    /// Called every few MB with the offset reached, for progress.
    fn progress(&mut self, _offset: u64) {}
}

/// The header of a dump.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: String,
    pub id_size: u32,
    pub timestamp_ms: u64,
    /// Byte offset of the first record.
    pub records_start: u64,
    pub file_len: u64,
}

/// A buffered, position-tracking input with errors that name the current record.
struct Input {
    r: BufReader<File>,
    pos: u64,
    len: u64,
    id_size: u32,
    record: &'static str,
    record_start: u64,
}

impl Input {
    fn truncated(&self) -> Error {
        Error::Truncated {
            record: self.record,
            offset: self.record_start,
        }
    }

    fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            record: self.record,
            offset: self.record_start,
            detail: detail.into(),
        }
    }

    fn begin(&mut self, record: &'static str) {
        self.record = record;
        self.record_start = self.pos;
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<()> {
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.truncated()),
            Err(e) => Err(e.into()),
        }
    }

    fn u1(&mut self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    fn u2(&mut self) -> Result<u16> {
        let mut b = [0u8; 2];
        self.fill(&mut b)?;
        Ok(u16::from_be_bytes(b))
    }

    fn u4(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn u8(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn id(&mut self) -> Result<u64> {
        if self.id_size == 4 {
            Ok(u64::from(self.u4()?))
        } else {
            self.u8()
        }
    }

    /// A value of basic type `t` as raw bits (object ids as ids).
    fn value(&mut self, t: u8) -> Result<u64> {
        Ok(match value_size(t, self.id_size) {
            Some(1) => u64::from(self.u1()?),
            Some(2) => u64::from(self.u2()?),
            Some(4) => u64::from(self.u4()?),
            Some(8) => self.u8()?,
            _ => return Err(self.corrupt(format!("unknown basic type {t}"))),
        })
    }

    fn skip(&mut self, n: u64) -> Result<()> {
        if self.pos + n > self.len {
            return Err(self.truncated());
        }
        self.r.seek_relative(n as i64)?;
        self.pos += n;
        Ok(())
    }

    /// Reads `n` bytes into `buf`, after checking that they lie inside `end`.
    fn bytes_into(&mut self, n: u64, end: u64, buf: &mut Vec<u8>) -> Result<()> {
        if self.pos + n > end {
            return Err(self.corrupt(format!(
                "{n} bytes announced but only {} remain in the record",
                end.saturating_sub(self.pos)
            )));
        }
        if self.pos + n > self.len {
            return Err(self.truncated());
        }
        buf.clear();
        buf.resize(n as usize, 0);
        let mut tmp = std::mem::take(buf);
        let r = self.fill(&mut tmp);
        *buf = tmp;
        r
    }
}

/// Reads the header of the file at `path`.
pub fn read_header(path: &Path) -> Result<Header> {
    let mut f = File::open(path)?;
    let file_len = f.metadata()?.len();
    let mut head = vec![0u8; 64.min(file_len as usize)];
    f.read_exact(&mut head)?;
    let Some(nul) = head.iter().position(|&b| b == 0) else {
        return Err(Error::NotHprof("no 'JAVA PROFILE 1.0.x' header".into()));
    };
    let version = String::from_utf8_lossy(&head[..nul]).into_owned();
    if !version.starts_with("JAVA PROFILE 1.0") {
        return Err(Error::NotHprof(format!(
            "the header reads {:?}, not 'JAVA PROFILE 1.0.x'",
            version.chars().take(40).collect::<String>()
        )));
    }
    let at = nul + 1;
    if head.len() < at + 12 {
        return Err(Error::Truncated {
            record: "the file header",
            offset: 0,
        });
    }
    let id_size = u32::from_be_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    if id_size != 4 && id_size != 8 {
        return Err(Error::Corrupt {
            record: "the file header",
            offset: at as u64,
            detail: format!("identifier size {id_size} (must be 4 or 8)"),
        });
    }
    let timestamp_ms = u64::from_be_bytes(head[at + 4..at + 12].try_into().expect("8 bytes"));
    Ok(Header {
        version,
        id_size,
        timestamp_ms,
        records_start: (at + 12) as u64,
        file_len,
    })
}

fn open(path: &Path, header: &Header, at: u64, buffer: usize) -> Result<Input> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(at))?;
    Ok(Input {
        r: BufReader::with_capacity(buffer, f),
        pos: at,
        len: header.file_len,
        id_size: header.id_size,
        record: "the file header",
        record_start: 0,
    })
}

/// One sub-record of a heap dump segment; object contents are in the caller's buffer.
enum Sub {
    Root(u64, Root),
    Class(ClassDump),
    Instance { id: u64, class_id: u64, size: u32 },
    ObjectArray { id: u64, class_id: u64, n: u32 },
    PrimitiveArray { id: u64, ty: u8, n: u32 },
}

/// A HEAP DUMP or HEAP DUMP SEGMENT body: where its sub-records lie in the file.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

/// One forward pass over the whole file. Returns the heap dump segments found.
pub fn scan(path: &Path, header: &Header, v: &mut impl Visitor) -> Result<Vec<Segment>> {
    let mut input = open(path, header, header.records_start, 1 << 20)?;
    let mut buf = Vec::new();
    let mut segments = Vec::new();
    let mut next_progress = 0u64;
    while input.pos < input.len {
        input.begin("a record header");
        let tag = input.u1()?;
        let _time = input.u4()?;
        let length = u64::from(input.u4()?);
        let body = input.pos;
        let end = body + length;
        match tag {
            0x01 => {
                input.record = "a UTF8 record";
                if length < u64::from(header.id_size) {
                    return Err(input.corrupt("shorter than an identifier"));
                }
                let id = input.id()?;
                input.bytes_into(end - input.pos, end, &mut buf)?;
                v.utf8(id, &buf);
            }
            0x02 => {
                input.record = "a LOAD CLASS record";
                let serial = input.u4()?;
                let class_id = input.id()?;
                let _trace = input.u4()?;
                let name_id = input.id()?;
                v.load_class(serial, class_id, name_id);
            }
            0x04 => {
                input.record = "a STACK FRAME record";
                let frame = FrameRecord {
                    id: input.id()?,
                    method_name: input.id()?,
                    signature: input.id()?,
                    source_file: input.id()?,
                    class_serial: input.u4()?,
                    line: input.u4()? as i32,
                };
                v.frame(frame);
            }
            0x05 => {
                input.record = "a STACK TRACE record";
                let serial = input.u4()?;
                let thread = input.u4()?;
                let n = u64::from(input.u4()?);
                if n * u64::from(header.id_size) > end.saturating_sub(input.pos) {
                    return Err(input.corrupt(format!("{n} frames do not fit the record")));
                }
                let mut frames = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    frames.push(input.id()?);
                }
                v.trace(serial, thread, frames);
            }
            0x0C | 0x1C => {
                if end > input.len {
                    input.record = "a HEAP DUMP SEGMENT record";
                    return Err(input.truncated());
                }
                segments.push(Segment { start: body, end });
                let (contents, primitives) = (v.wants_contents(), v.wants_primitives());
                while input.pos < end {
                    if input.pos >= next_progress {
                        v.progress(input.pos);
                        next_progress = input.pos + (16 << 20);
                    }
                    let offset = input.pos;
                    match sub_record(&mut input, end, contents, primitives, &mut buf)? {
                        Sub::Root(id, root) => v.root(id, root),
                        Sub::Class(c) => v.class_dump(offset, c),
                        Sub::Instance { id, class_id, size } => {
                            v.instance(offset, id, class_id, size, &buf)
                        }
                        Sub::ObjectArray { id, class_id, n } => {
                            v.object_array(offset, id, class_id, n, &buf)
                        }
                        Sub::PrimitiveArray { id, ty, n } => {
                            v.primitive_array(offset, id, ty, n, &buf)
                        }
                    }
                }
            }
            _ => {}
        }
        if input.pos > end {
            input.record = "a record";
            return Err(input.corrupt(format!(
                "its contents run {} bytes past its length {length}",
                input.pos - end
            )));
        }
        if input.pos < end {
            input.skip(end - input.pos)?;
        }
    }
    v.progress(input.len);
    if segments.is_empty() {
        return Err(Error::NoHeap);
    }
    Ok(segments)
}

/// Reads the sub-record at the input's position; contents go to `buf` when asked for.
fn sub_record(
    input: &mut Input,
    end: u64,
    contents: bool,
    primitives: bool,
    buf: &mut Vec<u8>,
) -> Result<Sub> {
    let id_size = u64::from(input.id_size);
    input.begin("a heap dump sub-record");
    let tag = input.u1()?;
    let sub = match tag {
        0xFF => {
            input.record = "a ROOT UNKNOWN sub-record";
            Sub::Root(input.id()?, Root::Unknown)
        }
        0x01 => {
            input.record = "a ROOT JNI GLOBAL sub-record";
            let id = input.id()?;
            let _ref = input.id()?;
            Sub::Root(id, Root::JniGlobal)
        }
        0x02 => {
            input.record = "a ROOT JNI LOCAL sub-record";
            let id = input.id()?;
            let (thread, depth) = (input.u4()?, input.u4()?);
            Sub::Root(id, Root::JniLocal { thread, depth })
        }
        0x03 => {
            input.record = "a ROOT JAVA FRAME sub-record";
            let id = input.id()?;
            let (thread, depth) = (input.u4()?, input.u4()?);
            Sub::Root(id, Root::JavaFrame { thread, depth })
        }
        0x04 => {
            input.record = "a ROOT NATIVE STACK sub-record";
            let id = input.id()?;
            let thread = input.u4()?;
            Sub::Root(id, Root::NativeStack { thread })
        }
        0x05 => {
            input.record = "a ROOT STICKY CLASS sub-record";
            Sub::Root(input.id()?, Root::StickyClass)
        }
        0x06 => {
            input.record = "a ROOT THREAD BLOCK sub-record";
            let id = input.id()?;
            let thread = input.u4()?;
            Sub::Root(id, Root::ThreadBlock { thread })
        }
        0x07 => {
            input.record = "a ROOT MONITOR USED sub-record";
            Sub::Root(input.id()?, Root::MonitorUsed)
        }
        0x08 => {
            input.record = "a ROOT THREAD OBJECT sub-record";
            let id = input.id()?;
            let (thread, trace) = (input.u4()?, input.u4()?);
            Sub::Root(id, Root::ThreadObject { thread, trace })
        }
        0x20 => {
            input.record = "a CLASS DUMP sub-record";
            Sub::Class(class_dump(input)?)
        }
        0x21 => {
            input.record = "an INSTANCE DUMP sub-record";
            let id = input.id()?;
            let _trace = input.u4()?;
            let class_id = input.id()?;
            let size = input.u4()?;
            read_or_skip(input, u64::from(size), end, contents, buf)?;
            Sub::Instance { id, class_id, size }
        }
        0x22 => {
            input.record = "an OBJECT ARRAY DUMP sub-record";
            let id = input.id()?;
            let _trace = input.u4()?;
            let n = input.u4()?;
            let class_id = input.id()?;
            read_or_skip(input, u64::from(n) * id_size, end, contents, buf)?;
            Sub::ObjectArray { id, class_id, n }
        }
        0x23 => {
            input.record = "a PRIMITIVE ARRAY DUMP sub-record";
            let id = input.id()?;
            let _trace = input.u4()?;
            let n = input.u4()?;
            let t = input.u1()?;
            let Some(size) = value_size(t, input.id_size).filter(|_| t != ty::OBJECT) else {
                return Err(input.corrupt(format!("unknown element type {t}")));
            };
            read_or_skip(input, u64::from(n) * u64::from(size), end, primitives, buf)?;
            Sub::PrimitiveArray { id, ty: t, n }
        }
        _ => return Err(input.corrupt(format!("unknown sub-record tag 0x{tag:02x}"))),
    };
    if input.pos > end {
        return Err(input.corrupt("runs past the end of its heap dump segment"));
    }
    Ok(sub)
}

fn read_or_skip(input: &mut Input, n: u64, end: u64, read: bool, buf: &mut Vec<u8>) -> Result<()> {
    if read {
        return input.bytes_into(n, end, buf);
    }
    if input.pos + n > end {
        return Err(input.corrupt(format!(
            "{n} bytes announced but only {} remain in the segment",
            end.saturating_sub(input.pos)
        )));
    }
    buf.clear();
    input.skip(n)
}

fn class_dump(input: &mut Input) -> Result<ClassDump> {
    let mut c = ClassDump {
        id: input.id()?,
        ..ClassDump::default()
    };
    let _trace = input.u4()?;
    c.super_id = input.id()?;
    c.loader_id = input.id()?;
    let _signers = input.id()?;
    let _domain = input.id()?;
    let _reserved1 = input.id()?;
    let _reserved2 = input.id()?;
    c.instance_size = input.u4()?;
    let constants = input.u2()?;
    for _ in 0..constants {
        let _index = input.u2()?;
        let t = input.u1()?;
        input.value(t)?;
    }
    let statics = input.u2()?;
    for _ in 0..statics {
        let name = input.id()?;
        let t = input.u1()?;
        let value = input.value(t)?;
        c.statics.push((name, t, value));
    }
    let fields = input.u2()?;
    for _ in 0..fields {
        let name = input.id()?;
        let t = input.u1()?;
        if value_size(t, input.id_size).is_none() {
            return Err(input.corrupt(format!("field of unknown basic type {t}")));
        }
        c.fields.push((name, t));
    }
    Ok(c)
}

/// One object read back from the file.
#[derive(Clone, Debug)]
pub enum Object {
    /// A class object (its statics are in the graph as roots).
    Class(ClassDump),
    Instance {
        class_id: u64,
        fields: Vec<u8>,
    },
    ObjectArray {
        class_id: u64,
        elements: Vec<u8>,
    },
    /// A primitive array, its contents cut at the locator's limit.
    PrimitiveArray {
        ty: u8,
        n: u32,
        data: Vec<u8>,
    },
}

/// Random access to the n-th object of the file (objects numbered in file order, as a pass
/// meets them), from offsets kept for every [`CHECKPOINT`]-th object.
pub struct Locator {
    input: Input,
    segments: Vec<Segment>,
    checkpoints: Vec<u64>,
    buf: Vec<u8>,
}

/// One offset is kept per this many objects.
pub const CHECKPOINT: usize = 64;

impl Locator {
    pub fn open(
        path: &Path,
        header: &Header,
        segments: Vec<Segment>,
        checkpoints: Vec<u64>,
    ) -> Result<Locator> {
        Ok(Locator {
            input: open(path, header, header.records_start, 64 << 10)?,
            segments,
            checkpoints,
            buf: Vec::new(),
        })
    }

    /// The id and contents of object number `n` (primitive arrays cut at 64 KiB).
    pub fn object(&mut self, n: usize) -> Result<(u64, Object)> {
        let Some(&start) = self.checkpoints.get(n / CHECKPOINT) else {
            return Err(Error::Corrupt {
                record: "the object table",
                offset: 0,
                detail: format!("no object number {n}"),
            });
        };
        self.input.r.seek(SeekFrom::Start(start))?;
        self.input.pos = start;
        let mut seg = self.segments.partition_point(|s| s.end <= start);
        let mut skip = n % CHECKPOINT;
        loop {
            let Some(&Segment { end, .. }) = self.segments.get(seg) else {
                return Err(Error::Corrupt {
                    record: "the object table",
                    offset: start,
                    detail: format!("object number {n} lies past the last segment"),
                });
            };
            if self.input.pos >= end {
                seg += 1;
                if let Some(next) = self.segments.get(seg) {
                    self.input.r.seek(SeekFrom::Start(next.start))?;
                    self.input.pos = next.start;
                }
                continue;
            }
            let want = skip == 0;
            let sub = sub_record(&mut self.input, end, want, want, &mut self.buf)?;
            let object = match sub {
                Sub::Root(..) => continue,
                Sub::Class(c) => (c.id, Object::Class(c)),
                Sub::Instance { id, class_id, .. } => (
                    id,
                    Object::Instance {
                        class_id,
                        fields: std::mem::take(&mut self.buf),
                    },
                ),
                Sub::ObjectArray { id, class_id, .. } => (
                    id,
                    Object::ObjectArray {
                        class_id,
                        elements: std::mem::take(&mut self.buf),
                    },
                ),
                Sub::PrimitiveArray { id, ty, n } => {
                    let mut data = std::mem::take(&mut self.buf);
                    data.truncate(64 << 10);
                    (id, Object::PrimitiveArray { ty, n, data })
                }
            };
            if skip == 0 {
                return Ok(object);
            }
            skip -= 1;
        }
    }
}
