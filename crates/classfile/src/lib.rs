//! The class-file engine: read a class file into a model, rewrite method code through a
//! label-based IR, and write it back so that the JVM verifier accepts it. Pure Rust, no JVM
//! needed to unit-test it.
//!
//! - [`ClassFile`]: reader and writer; an unmodified read → write is byte-identical.
//! - [`Code`]: the label IR of one method, with layout (switch padding, jump widening) and
//!   StackMapTable relocation in the most compact legal frame forms.
//! - [`bba`]: basic-block analysis, default and precise (Binder & Hulaas, JP).
//! - [`instrument`]: the passes (`none`, method entry/exit, basic-block counters).
//! - [`subgraph`]: call targets, class headers and the probe pass of root-method profiling.
//! - `rewrite`: the per-method rewrite loop every pass shares.
#![forbid(unsafe_code)]

pub mod bba;
mod bytes;
mod class;
pub mod code;
mod constant_pool;
mod error;
pub mod instrument;
pub mod mutf8;
pub mod offline;
pub mod opcodes;
mod rewrite;
pub mod runtime;
pub mod subgraph;
pub mod timing;

pub use class::{
    ACC_ABSTRACT, ACC_INTERFACE, ACC_MODULE, ACC_NATIVE, ACC_STATIC, Attribute, ClassFile, Member,
};
pub use code::{Code, CodeAttr, CodeAttrBody, Frame, Handler, Insn, Label, VType};
pub use constant_pool::{Constant, ConstantPool};
pub use error::{Error, Result};
