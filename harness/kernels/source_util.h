// Helpers the kernel families share to describe their runtime-compiled kernels: KernelSource
// specs built from a family's common device header plus one kernel file, and the labels and
// records of their compile cases (kernel_registry.h). Torch-free (cs_kernel_sources).
#pragma once

#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart::kernels {

/// The text of device_common.cuh: the integer typedefs, number-format conversions and warp
/// reductions (cs_ names) every family's program starts with. make_kernel_source prepends it; a
/// family that assembles a program by hand must put it first too.
const char* device_common_source();

/// The parameter names, in order, of the `extern "C"` function `entry` defined or declared in
/// `text` (a kernel file: `extern "C" __global__ void __launch_bounds__(...) entry(...)`, or an
/// `extern "C" { ... }` block holding it). Reads the text as written, before preprocessing:
/// comments, line breaks, qualifiers (`const`, `__restrict__`, `__grid_constant__`, `*`, `&`),
/// macros used as types (`cs_u16*`, `pa_cache_t*`), dependent types (`typename X<A>::T*`),
/// `__align__(n)` / `__attribute__((...))` and array suffixes are all allowed; a list of `()` or
/// `(void)` has no names. The entry is looked for only where `extern "C"` applies (not in
/// comments, strings, #directives, or function bodies); several declarations of it must agree.
/// Throws Error "kernel <entry>: ..." when no such entry is found, when its declarations disagree,
/// or when a parameter cannot be read: it has no name, a default argument, a function-pointer or
/// other unsupported form, `...`, or a #directive inside the list.
std::vector<std::string> kernel_param_names(const char* text, const char* entry);

/// The declared types of the same parameters (jit::ParamType: kind, a pointee's element size and
/// class), read as kernel_param_names reads the names; same errors. Types the reader cannot map
/// (template-dependent, a family's macro types) come back kUnchecked or as pointers of any
/// element.
std::vector<jit::ParamType> kernel_param_types(const char* text, const char* entry);

/// The KernelSource of kernel `name` (also its extern "C" entry unless `entry` names another
/// one): one NVRTC program made of the helpers all families share (device_common_source()), the
/// family's shared device helpers `common`, then the kernel file `text`, behind a
/// `#line 1 "<name>.cu"` so NVRTC's messages point into the kernel file. Its arg_names are the
/// entry's parameter names as `text` declares them (kernel_param_names), so the .cu signature is
/// the only list of them; its arg_types are their declared types (kernel_param_types), which
/// every launch and compile case is checked against (jit::check_launch_args). The program text
/// is kept in `storage`, which must outlive the returned
/// source (a function-local static). Throws Error "kernel <entry>: ..." when `text` holds no
/// such entry or its parameter list cannot be read.
jit::KernelSource make_kernel_source(const char* common, const char* name, const char* text,
                                     std::string& storage, const char* entry = nullptr);

/// Printable identity of a specialization: "<kernel>[NAME=value,...]", constexprs in order.
std::string compile_case_label(const jit::KernelSource& k, const std::vector<jit::Constexpr>& cs);

/// A compile case of `family` ("paged") for kernel `k`, labelled by compile_case_label, with
/// `args` the launch arguments it compiles for. Throws Error "<family>: compile case <label> ..."
/// when `args` does not hold one argument per parameter of `k` (k.arg_names), and
/// jit::check_launch_args's Error when an argument does not fit its declared type.
KernelCompileCase make_compile_case(const char* family, const jit::KernelSource& k,
                                    std::vector<jit::Constexpr> cs,
                                    std::vector<jit::KernelArg> args);

/// Query heads per KV head (a kernel's KV_GROUP). Throws InputError
/// "<family>: <q> query heads is not a positive multiple of <kv> KV heads" otherwise.
int kv_group(const char* family, int num_q_heads, int num_kv_heads);

/// Throws InputError "<family>: <what> <value> must be positive" unless value > 0 (layout
/// geometry such as block_size, num_kv_heads).
void require_positive(const char* family, const char* what, int value);

}  // namespace coldstart::kernels
