# tests/gpu/kernels.cmake — the CUDA kernel tests (issue 9), included from
# tests/gpu/CMakeLists.txt when the CUDA backend is on.
#
# Two builds of the same plain-C test programs (gpu_test.h harness, no Check):
#  - test_gpu_<name>: against the real kernels (label gpu; skip with exit 77
#    where there is no device);
#  - test_gpu_<name>_emu: against the same kernel sources compiled as C++ for
#    the CPU emulator in emu/ (labels unit, emu), with small shapes, so the
#    kernels' indexing, masking and synchronisation run in CI without a GPU.
# tests/gpu/check.sh builds the gpu ones on the device machine without CMake.
set(IFD_GPU_TESTS attention fused dequant sample vision)
# The sampler test compiles the CPU sampler in directly (not ifd_worker_lib,
# which would drag the real CUDA library into the emulator build), with the
# flags worker/CMakeLists.txt gives it, and the grammar masks it applies.
set(IFD_GPU_SAMPLER ${PROJECT_SOURCE_DIR}/worker/sampler.c)
# The libraries below the worker that the tests compiling worker sources link.
set(IFD_GPU_WORKER_LIBS ifd_common ifd_modelfile ifd_kvpool ifd_tokenizer ifd_chat ifd_grammar
    ifd_inspect)
set_source_files_properties(${PROJECT_SOURCE_DIR}/worker/sampler.c PROPERTIES COMPILE_OPTIONS
                            "-ffp-contract=off;-fno-trapping-math;-fopenmp-simd")

# ifd_add_gpu_tests(SUFFIX HARNESS TIMEOUT LABELS...): test_gpu_<name><SUFFIX> for each of
# IFD_GPU_TESTS, linking the harness library (which brings the kernels).
function(ifd_add_gpu_tests suffix harness timeout)
  foreach(t ${IFD_GPU_TESTS})
    set(srcs test_gpu_${t}.c)
    if(t STREQUAL "sample")
      list(APPEND srcs ${IFD_GPU_SAMPLER})
    endif()
    ifd_add_test(test_gpu_${t}${suffix} SOURCES ${srcs} LIBS ${harness} LABELS ${ARGN}
                 TIMEOUT ${timeout})
    target_include_directories(test_gpu_${t}${suffix} PRIVATE ${PROJECT_SOURCE_DIR})
  endforeach()
endfunction()

add_library(ifd_gpu_test STATIC gpu_test.c)
target_include_directories(ifd_gpu_test PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(ifd_gpu_test PUBLIC ifd_kernels_cuda ifd_kernels ${IFD_GPU_WORKER_LIBS})
ifd_add_gpu_tests("" ifd_gpu_test 600 gpu)

# ---- the emulator build -------------------------------------------------------
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  set(emu_srcs emu/cuda_emu.cc emu/cuda_emu_vmm.cc emu/cublaslt_emu.cc)
  foreach(k device attn_decode attn_prefill rmsnorm rope_kv glu convert embed dequant sample vision
            kvseg_cuda)
    set(w ${CMAKE_CURRENT_BINARY_DIR}/emu/${k}_emu.cc)
    file(CONFIGURE OUTPUT ${w}
         CONTENT "#include \"${PROJECT_SOURCE_DIR}/kernels/cuda/${k}.cu\"\n")
    list(APPEND emu_srcs ${w})
  endforeach()
  add_library(ifd_kernels_emu STATIC ${emu_srcs})
  target_compile_features(ifd_kernels_emu PUBLIC cxx_std_17)
  target_compile_definitions(ifd_kernels_emu PUBLIC IFD_CUDA_EMU)
  target_include_directories(ifd_kernels_emu PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/emu
                             ${PROJECT_SOURCE_DIR}/kernels ${CUDAToolkit_INCLUDE_DIRS})
  # No FMA contraction (the sampler is bit-exact), no fortified longjmp (the
  # fibers switch stacks with it), CUDA pragmas are unknown to g++.
  target_compile_options(ifd_kernels_emu PRIVATE -ffp-contract=off -U_FORTIFY_SOURCE
                         -Wno-unknown-pragmas -Wall -Wextra)
  target_link_libraries(ifd_kernels_emu PUBLIC ifd_common)

  add_library(ifd_gpu_test_emu STATIC gpu_test.c)
  target_include_directories(ifd_gpu_test_emu PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(ifd_gpu_test_emu PUBLIC ifd_kernels_emu ifd_kernels ${IFD_GPU_WORKER_LIBS})

  ifd_add_gpu_tests(_emu ifd_gpu_test_emu 300 unit emu)
  foreach(t ${IFD_GPU_TESTS})
    set_target_properties(test_gpu_${t}_emu PROPERTIES LINKER_LANGUAGE CXX)
  endforeach()

  # The emulator's integer MMA (mma.m16n8k32.s8) against a plain product.
  ifd_add_test(test_cuda_emu_mma SOURCES emu/test_cuda_emu_mma.cc LIBS ifd_kernels_emu
               LABELS unit emu TIMEOUT 60)
  target_compile_options(test_cuda_emu_mma PRIVATE -Wno-unknown-pragmas)

  # The KV pool's device segments shared between processes (VMM fd, IPC
  # fallback, SIGKILLed creators, a forgetful driver) on the emulated driver.
  ifd_add_test(test_gpu_kvpool_emu SOURCES test_gpu_kvpool.c LIBS ifd_kernels_emu ifd_kvpool
               LABELS unit emu TIMEOUT 60)
  target_compile_definitions(test_gpu_kvpool_emu PRIVATE IFD_TEST_KVPOOL_EMU)
  set_target_properties(test_gpu_kvpool_emu PROPERTIES LINKER_LANGUAGE CXX)

  # The CUDA backend end to end: model.c and both backends compiled into the
  # test (ifd_worker_lib would link the real CUDA libraries), the kernels and
  # the CUDA runtime / cuBLASLt slice from the emulator.
  # Speculative decoding's proposers and policy, for every engine built here.
  set(IFD_SPEC_SRCS ${PROJECT_SOURCE_DIR}/worker/ngram.c ${PROJECT_SOURCE_DIR}/worker/spec.c
      ${PROJECT_SOURCE_DIR}/worker/spec_draft.c)
  set(IFD_BACKEND_SRCS ${PROJECT_SOURCE_DIR}/worker/model.c
      ${PROJECT_SOURCE_DIR}/worker/backend_cpu.c ${PROJECT_SOURCE_DIR}/worker/backend_cuda.c)
  ifd_add_test(test_backend_cuda_emu SOURCES test_backend_cuda.c gpu_model_test.c ${IFD_BACKEND_SRCS}
               ${IFD_GPU_SAMPLER} ${PROJECT_SOURCE_DIR}/worker/generate.c
               ${PROJECT_SOURCE_DIR}/worker/engine.c
               ${IFD_SPEC_SRCS}
               LIBS ifd_gpu_test_emu LABELS unit emu TIMEOUT 300)
  target_include_directories(test_backend_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(test_backend_cuda_emu PROPERTIES LINKER_LANGUAGE CXX)

  # The vision tower on the CUDA backend against transformers (the tiny model).
  set(IFD_VISION_CUDA_SRCS test_vision_cuda.c ${PROJECT_SOURCE_DIR}/worker/vision.c
      ${IFD_BACKEND_SRCS} ${IFD_GPU_SAMPLER} ${PROJECT_SOURCE_DIR}/worker/generate.c
      ${PROJECT_SOURCE_DIR}/worker/engine.c ${IFD_SPEC_SRCS})
  ifd_add_test(test_vision_cuda_emu SOURCES ${IFD_VISION_CUDA_SRCS} LIBS ifd_gpu_test_emu
               LABELS unit emu TIMEOUT 300)
  target_include_directories(test_vision_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(test_vision_cuda_emu PROPERTIES LINKER_LANGUAGE CXX)

  # Device sampling, decode graphs, the steady state (issue 13 items 2-3).
  ifd_add_test(test_cuda_step_emu SOURCES test_cuda_step.c gpu_model_test.c ${IFD_BACKEND_SRCS}
               ${IFD_GPU_SAMPLER} ${PROJECT_SOURCE_DIR}/worker/engine.c
               ${IFD_SPEC_SRCS}
               ${PROJECT_SOURCE_DIR}/worker/kvprobe.c ${PROJECT_SOURCE_DIR}/worker/kvsize.c
               LIBS ifd_gpu_test_emu LABELS unit emu TIMEOUT 300)
  target_include_directories(test_cuda_step_emu PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CMAKE_CURRENT_SOURCE_DIR}/emu ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(test_cuda_step_emu PROPERTIES LINKER_LANGUAGE CXX)

  # The engine (batched = solo, preemption, prefix reuse) through the CUDA
  # backend on the emulator: tests/unit/test_engine_model.c built for it.
  ifd_add_test(test_engine_cuda_emu
               SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_engine_model.c ${IFD_BACKEND_SRCS}
                       ${IFD_GPU_SAMPLER} ${PROJECT_SOURCE_DIR}/worker/engine.c
                       ${IFD_SPEC_SRCS}
               LIBS ifd_kernels_emu ifd_kernels ${IFD_GPU_WORKER_LIBS} PkgConfig::JANSSON
               LABELS unit emu TIMEOUT 300)
  target_compile_definitions(test_engine_cuda_emu PRIVATE IFD_TEST_ENGINE_CUDA_EMU)
  # The same with the quantized K/V the CUDA kernels read (docs/kvpool.md): batched
  # equals solo, prefix reuse, preemption and a SIGKILLed worker's successor per type.
  foreach(kvt q8_0 fp8)
    add_test(NAME test_engine_cuda_emu_${kvt} COMMAND test_engine_cuda_emu --kv-dtype ${kvt})
    ifd_test_properties(test_engine_cuda_emu_${kvt} 300 "unit;emu")
  endforeach()
  target_include_directories(test_engine_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(test_engine_cuda_emu PROPERTIES LINKER_LANGUAGE CXX)

  # tests/gpu/check.sh itself (--dry-run, the poisoned headers, --emu --quick: tier A on
  # the emulator, tier B's test_gpu_device from this build), so the device script cannot rot.
  ifd_add_script_test(test_gpu_check_emu
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_check_script.sh ${CMAKE_BINARY_DIR}
            ${CMAKE_CURRENT_BINARY_DIR}/check-emu
    LABELS unit emu TIMEOUT 240)

  # inferd-worker on the emulator: the whole worker (serve loop, engine,
  # model, both backends) with the emulated CUDA runtime, cuBLASLt and the
  # real kernels, for the daemon's --gpus test (test_daemon_gpu_emu). Only
  # this test binary links the emulator; the real inferd-worker opens the
  # CUDA module (libinferd-cuda.so) when asked for a GPU, and inferd links
  # neither. Here the module's table is linked in (IFD_CUDA_STATIC).
  add_executable(inferd-worker-emu ${PROJECT_SOURCE_DIR}/worker/main.c
                 ${PROJECT_SOURCE_DIR}/worker/cuda_module.c
                 ${PROJECT_SOURCE_DIR}/worker/cuda_loader.c
                 ${PROJECT_SOURCE_DIR}/worker/worker_cli.c ${PROJECT_SOURCE_DIR}/worker/serve.c
                 ${PROJECT_SOURCE_DIR}/worker/backend_factory.c
                 ${PROJECT_SOURCE_DIR}/worker/worker_model.c ${PROJECT_SOURCE_DIR}/worker/kvsize.c
                 ${PROJECT_SOURCE_DIR}/worker/kvprobe.c
                 ${IFD_BACKEND_SRCS} ${IFD_GPU_SAMPLER}
                 ${PROJECT_SOURCE_DIR}/worker/generate.c ${PROJECT_SOURCE_DIR}/worker/engine.c
                 ${PROJECT_SOURCE_DIR}/worker/generate_spec.c
                 ${PROJECT_SOURCE_DIR}/worker/image_embd.c ${IFD_SPEC_SRCS}
                 ${PROJECT_SOURCE_DIR}/worker/vision.c ${PROJECT_SOURCE_DIR}/worker/image_cache.c
                 ${PROJECT_SOURCE_DIR}/worker/serve_vision.c)
  target_compile_definitions(inferd-worker-emu PRIVATE IFD_HAVE_CUDA=1 IFD_CUDA_STATIC=1)
  target_include_directories(inferd-worker-emu PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(inferd-worker-emu PRIVATE ifd_kernels_emu ifd_kernels ${IFD_GPU_WORKER_LIBS}
                        ifd_proto ifd_image PkgConfig::JANSSON)
  set_target_properties(inferd-worker-emu PROPERTIES LINKER_LANGUAGE CXX)
  ifd_add_script_test(test_daemon_gpu_emu
    COMMAND ${PROJECT_SOURCE_DIR}/tests/integration/test_daemon.sh gpu_emu
            $<TARGET_FILE:inferd> $<TARGET_FILE:inferd-worker> $<TARGET_FILE:inferd-worker-emu>
    LABELS emu model TIMEOUT 300)
  # --gpu-dtype bf16 with the quantized K/V the CUDA kernels read, served end to end:
  # the pool sized in the POOL step, a streamed chat, a SIGKILLed worker's replacement
  # serving the same prompt from the cached prefix with the same tokens.
  foreach(kvt q8_0 fp8)
    ifd_add_script_test(test_daemon_gpu_emu_${kvt}
      COMMAND ${CMAKE_COMMAND} -E env INFERD_TEST_KV_DTYPE=${kvt}
              ${PROJECT_SOURCE_DIR}/tests/integration/test_daemon.sh gpu_emu
              $<TARGET_FILE:inferd> $<TARGET_FILE:inferd-worker> $<TARGET_FILE:inferd-worker-emu>
              test_gpu_stream_and_pool_size
      LABELS emu model TIMEOUT 300)
  endforeach()
  # The vision oracle through the daemon on the emulated CUDA backend (issue 28 item 7): the
  # tiny model's hd64/ variant, its image chats streamed and not against transformers (~20 s).
  ifd_add_script_test(test_daemon_vision_emu
    COMMAND ${PROJECT_SOURCE_DIR}/tests/integration/test_daemon.sh vision
            $<TARGET_FILE:inferd> $<TARGET_FILE:inferd-worker> $<TARGET_FILE:inferd-worker-emu>
    LABELS unit emu TIMEOUT 180)
  # The KV pool's device segment across a GPU worker's SIGKILL: the router's
  # fd keeps the prefixes (VMM); IPC memory and a forgetful driver rebuild.
  ifd_add_script_test(test_daemon_gpu_pool_emu
    COMMAND ${PROJECT_SOURCE_DIR}/tests/integration/test_daemon.sh gpu_pool_emu
            $<TARGET_FILE:inferd> $<TARGET_FILE:inferd-worker-emu>
    LABELS emu model TIMEOUT 300)
endif()

# On a GPU: the same test against the real CUDA backend (ifd_backend_cuda,
# linked in; the worker reaches the same code through libinferd-cuda.so).
ifd_add_test(test_backend_cuda SOURCES test_backend_cuda.c gpu_model_test.c
             LIBS ifd_backend_cuda ifd_gpu_test ifd_worker_lib LABELS gpu TIMEOUT 600)
ifd_add_test(test_cuda_step SOURCES test_cuda_step.c gpu_model_test.c
             LIBS ifd_backend_cuda ifd_gpu_test ifd_worker_lib LABELS gpu TIMEOUT 600)
ifd_add_test(test_vision_cuda SOURCES test_vision_cuda.c
             LIBS ifd_backend_cuda ifd_gpu_test ifd_worker_lib LABELS gpu TIMEOUT 600)
