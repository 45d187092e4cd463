// C10D_API: what libc10d.so exports. The library is built with hidden visibility
// (src/CMakeLists.txt), so only the declarations of include/c10d/ marked with it are visible to
// a program: classes (their vtables and type_info too, which catching an exception or a
// dynamic_cast across the library's boundary needs), and free functions. A program that includes
// these headers sees the same attribute, so the typeinfo and vtables it emits for header-only
// classes (the error types, ProcessGroup, Store) merge with the library's.
//
// Every name is inside the inline namespace c10d::v1 (user code writes c10d::ProcessGroup), so no
// symbol of ours can equal one of libtorch's, whose C++ namespace is also c10d (docs/torch.md).
//
// Thread-safety and lifetime: nothing to say; a macro only.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define C10D_API __attribute__((visibility("default")))
#else
#define C10D_API
#endif
