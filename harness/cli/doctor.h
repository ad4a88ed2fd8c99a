// coldstart doctor: what this machine and this build can do, and what to fix.
#pragma once

namespace coldstart::cli {

/// `coldstart doctor`: prints to stdout the build (libtorch version, CUDA backend or not, CUDA
/// headers, NVRTC), the driver version, each GPU (name, SM, SM count, memory), the mode a replay
/// would pick (`--device auto`), then runs the checks: NVRTC compiles a tiny kernel for the GPU's
/// arch (sm_90 without a GPU), NVRTC finds the CUDA headers (<cuda_bf16.h>), the driver loads and
/// runs that cubin (cuModuleLoadData + launch), and a CUDA graph captures and replays a torch
/// op. Every failed or skipped check gets one line saying why and what to do.
/// Returns 0 when every check the detected mode needs passed (compile-only: NVRTC and headers;
/// cuda: all of them), 1 otherwise. Never throws.
int doctor_main();

}  // namespace coldstart::cli
