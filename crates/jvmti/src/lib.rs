//! The only FFI boundary: safe wrappers over JVMTI/JNI, AsyncGetCallTrace and the POSIX calls
//! the sampler needs.
