# sigserve build. Binaries go to $(BUILD)/; header dependencies are tracked (-MMD);
# CUDA parts are compiled only when nvcc is found. `make test` and `make run` install
# missing Debian packages first (deploy/install-deps.sh), then build.

BUILD    ?= build
# Parallel by default: one job per CPU (a -j on the command line wins). Only at the top: a sub-make
# (make run, make test) shares its parent's jobs, and one that set -j again would say so in a warning.
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(JOBS)
endif
MAKEFLAGS += --no-print-directory
# Quiet by default: one short line per file built; V=1 prints the commands.
V        ?= 0
ifeq ($(V),1)
  quiet =
else
  quiet = @printf '  %-8s %s\n' '$(1)' '$(2)';
endif
CC       ?= cc
PYTHON   ?= /usr/bin/python3
PKGS     := libzmq libczmq libsodium libprotobuf-c libcjson libsystemd libmicrohttpd
OPT      ?= -O3
SAN      ?=
SERVICE_DIRS := service service/base service/weights service/backends service/backends/cuda service/serving \
                service/front service/ops
SERVICE_INC  := -Iservice
CFLAGS   := -std=gnu11 $(OPT) -g -fno-omit-frame-pointer -Wall -Wextra -Werror -Wno-psabi -MMD -MP \
            -Icommon -Itransport $(SERVICE_INC) -Isupport -Iclients -I$(BUILD)/gen $(SAN) \
            $(shell pkg-config --cflags $(PKGS) openblas 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) openblas 2>/dev/null) -lpthread -lm
LDFLAGS  := $(SAN)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
CFLAGS   += -DSIGSERVE_VERSION='"$(VERSION)"'
# The flags of a build without CUDA (check-nocuda), before the CUDA ones are added.
NOCUDA_CFLAGS := $(filter-out -MMD -MP,$(CFLAGS))

# CUDA: only when nvcc is found (PATH or the default toolkit folder).
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CFLAGS   += -DSIGSERVE_HAVE_CUDA=1 -Ikernels -isystem $(CUDA_HOME)/include
  CU_SRC   := $(wildcard kernels/*.cu)
  CU_OBJ   := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CU_SRC))
  NVFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -Ikernels -Xcompiler -Wall,-Wextra,-Werror,-fPIC -MMD -MP
  # Only the CUDA backend links these (libsigserve-cuda.so, which sigserve opens when a model needs the
  # GPU; libsigcuda.a, linked into the tests and tools that call the backend's own functions).
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lnvrtc -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
  # The sources NVRTC compiles at load (kernels/mlp_persistent_spec.cu, lstm_persistent_spec.cu), embedded as text.
  SPEC_SOURCES := kernels/sig_common.h kernels/sig_fused.h kernels/sig_spec.h kernels/sig_persistent.h kernels/sig_lstm.h \
                  kernels/mlp_persistent_impl.cuh kernels/sig_device.cuh \
                  kernels/mlp_persistent_kernel.cuh kernels/mlp_persistent_sync.cuh kernels/mlp_persistent_gemv.cuh \
                  kernels/mlp_persistent_io.cuh kernels/lstm_persistent.cu kernels/lstm_persistent_ctx.cuh \
                  kernels/lstm_persistent_exchange.cuh kernels/lstm_persistent_ops.cuh kernels/lstm_persistent_device.cuh \
                  kernels/lstm_persistent_impl.cuh
  SPEC_OBJ := $(BUILD)/obj/gen/spec_sources.o
endif

PROTO_C  := $(BUILD)/gen/signal.pb-c.c
PROTO_H  := $(BUILD)/gen/signal.pb-c.h
PROTO_PY := $(BUILD)/gen/py/signal_pb2.py
PROTO_OBJ := $(BUILD)/obj/gen/signal.pb-c.o

# Four libraries: common/ (what clients and server share), libsigcore (the server), support/
# (test and tool support: the float64 reference, random weights, the safetensors writer) and
# libsigclient. The client tools link libsigclient and common only: no config loader, safetensors
# reader or cJSON in them.
obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
COMMON_OBJ  := $(call obj,$(wildcard common/*.c))
# The ZMTP engine (transport/): the server's fronts and the clients speak ZeroMQ's wire with it.
TRANSPORT_OBJ := $(call obj,$(wildcard transport/*.c))
SUPPORT_OBJ := $(call obj,$(wildcard support/*.c))
# The CUDA backend (service/backends/cuda/ and kernels/) is not in the core: sigserve opens it as
# libsigserve-cuda.so when a model needs the GPU (service/backends/gpu_load.c), so a server of CPU models
# maps none of the CUDA libraries. The library finds the core's functions in sigserve (-rdynamic).
CORE_SRC := $(filter-out service/main.c service/backends/cuda/%.c,$(foreach d,$(SERVICE_DIRS),$(wildcard $(d)/*.c)))
# The one place that decides whether the server has CUDA: backends/gpu_load.c, or backends/no_gpu.c.
CORE_SRC := $(filter-out service/backends/$(if $(HAVE_CUDA),no_gpu,gpu_load).c,$(CORE_SRC))
CORE_OBJ := $(call obj,$(CORE_SRC)) $(PROTO_OBJ)
ifeq ($(HAVE_CUDA),1)
  CUDA_OBJ   := $(call obj,$(wildcard service/backends/cuda/*.c)) $(CU_OBJ) $(SPEC_OBJ)
  GPU_PLUGIN := $(BUILD)/libsigserve-cuda.so
  # Linked in first (its objects call the core's), kept whole by the one symbol gpu_load.c looks for.
  GPU_STATIC := -Wl,-u,sigserve_gpu_backend $(BUILD)/libsigcuda.a
endif
# sigserve and sigserve-test: every core object, and their symbols exported to libsigserve-cuda.so.
SERVER_LINK := -rdynamic -Wl,--whole-archive $(BUILD)/libsigcore.a -Wl,--no-whole-archive
CLIENT_OBJ := $(BUILD)/obj/clients/sigclient.o $(BUILD)/obj/clients/sigclient_cert.o \
              $(BUILD)/obj/clients/sigclient_dns.o $(BUILD)/obj/clients/sigclient_stream.o \
              $(BUILD)/obj/clients/sigclient_sock.o $(PROTO_OBJ) $(TRANSPORT_OBJ)
HISTOGRAM_OBJ := $(BUILD)/obj/clients/histogram.o
SIGLOAD_OBJ := $(call obj,$(or $(wildcard clients/sigload/*.c),$(wildcard clients/sigload.c))) $(HISTOGRAM_OBJ)
CLIENT_LIBS := $(shell pkg-config --libs libzmq libsodium libprotobuf-c 2>/dev/null) -lpthread -lm
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TOOLS    := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c)) $(BUILD)/sigbench $(BUILD)/lstmbench
# sigbench and lstmbench are folders of their own (tools/sigbench/: one file per table; tools/lstmbench/:
# one per subject)
SIGBENCH_OBJ := $(call obj,$(wildcard tools/sigbench/*.c))
# its oneDNN peer rows (tools/sigbench/onednn.c) where Debian's libdnnl-dev is installed
ifneq ($(wildcard /usr/include/dnnl.h),)
  $(BUILD)/obj/tools/sigbench/onednn.o: CFLAGS += -DSIGBENCH_HAVE_DNNL
  SIGBENCH_LIBS := -ldnnl
endif
LSTMBENCH_OBJ := $(call obj,$(wildcard tools/lstmbench/*.c))
LIBS     := $(BUILD)/libsigcore.a $(BUILD)/libsigcommon.a $(BUILD)/libsigsupport.a $(BUILD)/libsigclient.a \
            $(BUILD)/libsigzmtp.a
BINS     := $(BUILD)/sigserve $(BUILD)/sigserve-test $(BUILD)/sigclient $(BUILD)/sigload $(LIBS) $(BUILD)/libsigclient.so $(TOOLS) \
            $(GPU_PLUGIN)
# CUDA tools standing alone (no library of ours): built where nvcc is, so they keep compiling.
ifeq ($(HAVE_CUDA),1)
  BINS   += $(patsubst tools/%.cu,$(BUILD)/%,$(wildcard tools/*.cu))
endif
DEMO     := $(BUILD)/models/tick_mlp.safetensors

.PHONY: all deps run test test-all check check-nocuda asan test-asan bench curves clean
.SECONDARY:
.DEFAULT_GOAL := all

all: $(BINS) $(TESTS) $(DEMO) $(PROTO_PY)

deps:
	@./deploy/install-deps.sh

# make run builds what it runs: the server, the clients and the demo weights; the CUDA backend too
# where an NVIDIA driver is (`make all` builds everything, the tests included).
HAVE_DRIVER := $(shell test -e /proc/driver/nvidia/version -o -e /dev/nvidiactl && echo 1)
RUN_TARGETS := $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload $(DEMO) $(if $(HAVE_DRIVER),$(GPU_PLUGIN))
run: deps
	@$(MAKE) $(RUN_TARGETS)
	@if [ -n "$(GPU_PLUGIN)" ] && [ -z "$(HAVE_DRIVER)" ]; then echo "note: no NVIDIA driver here: the CUDA backend" \
	    "($(GPU_PLUGIN)) is not built; the demo model runs on the CPU (make all builds everything)"; fi
	$(BUILD)/sigserve --config config/sigserve.json

# What CI runs (.ci/run): every suite, then a short fuzz of each target (tests/fuzz, mk/fuzz.mk).
test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory check
	@$(MAKE) --no-print-directory fuzz-smoke

# The long runs, before an issue is resolved: everything make test does, every suite again under
# AddressSanitizer and UBSan (integration suites included), and each fuzz target for
# TEST_ALL_FUZZ_SECONDS (two at a time).
TEST_ALL_FUZZ_SECONDS ?= 600
test-all: test
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_ALL_FUZZ_SECONDS) FUZZ_JOBS=2

# The house rules (tools/check-house.py: service/'s layers, no call cycle in service/, clients/ or
# tools/, file sizes), then every suite already built; tests/run.sh prints one summary line.
check: all
	@$(PYTHON) tools/check-house.py $(BUILD)
	@$(MAKE) --no-print-directory check-nocuda
	@BUILD=$(BUILD) PYTHON=$(PYTHON) ./tests/run.sh $(TESTS)

# A machine without nvcc builds the CPU service, its tests and tools (deploy/Dockerfile's CPU image
# builds only what it installs, so it would not notice a tool that needs CUDA): every C file of
# such a build compiles there, syntax and types only, with a build's flags less the CUDA ones.
NOCUDA_SRC := $(filter-out service/backends/cuda/%.c service/backends/gpu_load.c,$(sort $(wildcard common/*.c transport/*.c support/*.c clients/*.c \
              clients/sigload/*.c tools/*.c tools/sigbench/*.c tools/lstmbench/*.c tests/*.c) $(foreach d,$(SERVICE_DIRS),$(wildcard $(d)/*.c))))
check-nocuda: $(PROTO_H)
	@printf '%s\n' $(NOCUDA_SRC) | xargs -P 2 -n 8 $(CC) $(NOCUDA_CFLAGS) -fsyntax-only
	@echo "PASS  check-nocuda  $(words $(NOCUDA_SRC)) C files compile without CUDA"

# The benchmark tables (docs/perf.md says how they were taken). One core, the demo model.
bench: all
	$(BUILD)/sigbench --weights $(DEMO) --cpu $(BENCH_CPU) --iterations $(BENCH_ITERATIONS)

# The latency curves (docs/perf.md): sigserve on loopback with the default config, an echo floor and a
# rate sweep up to saturation; files under $(BUILD)/curves/ (tools/curves.sh says what it runs).
curves: all
	BUILD=$(BUILD) ./tools/curves.sh

BENCH_CPU ?= 0
BENCH_ITERATIONS ?= 20000

asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT=-O1 SAN='-fsanitize=address,undefined -fno-sanitize-recover=all' all

test-asan: deps
	@SIGSERVE_SANITIZED=1 $(MAKE) --no-print-directory BUILD=build/asan OPT=-O1 SAN='-fsanitize=address,undefined -fno-sanitize-recover=all' check

# One run of protoc-c makes both files (a grouped target), so it runs once.
$(PROTO_C) $(PROTO_H) &: proto/signal.proto
	@mkdir -p $(BUILD)/gen
	$(call quiet,PROTOC,$@)protoc-c --proto_path=proto --c_out=$(BUILD)/gen proto/signal.proto

$(PROTO_PY): proto/signal.proto
	@mkdir -p $(BUILD)/gen/py
	$(call quiet,PROTOC,$@)protoc --proto_path=proto --python_out=$(BUILD)/gen/py proto/signal.proto

$(BUILD)/gen/spec_sources.c: $(SPEC_SOURCES) tools/embed-sources.sh
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)sh tools/embed-sources.sh $@ $(SPEC_SOURCES)

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(CFLAGS) -Wno-unused-parameter -fPIC -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(CFLAGS) -fPIC -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$<)$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libsigcore.a: $(CORE_OBJ)
$(BUILD)/libsigcuda.a: $(CUDA_OBJ)
$(BUILD)/libsigcommon.a: $(COMMON_OBJ)
$(BUILD)/libsigzmtp.a: $(TRANSPORT_OBJ)
$(BUILD)/libsigsupport.a: $(SUPPORT_OBJ)
$(BUILD)/libsigclient.a: $(CLIENT_OBJ)
$(LIBS) $(BUILD)/libsigcuda.a:
	@rm -f $@
	$(call quiet,AR,$@)ar rcs $@ $^

$(BUILD)/libsigclient.so: $(CLIENT_OBJ)
	$(call quiet,LINK,$@)$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SIGCLIENT_SONAME) -o $@ $^ $(CLIENT_LIBS)

$(BUILD)/libsigserve-cuda.so: $(CUDA_OBJ)
	$(call quiet,LINK,$@)$(CC) -shared $(LDFLAGS) -Wl,-Bsymbolic -o $@ $^ $(CUDA_LDLIBS) -lpthread -lm

$(BUILD)/sigserve: $(BUILD)/obj/service/main.o $(BUILD)/libsigcore.a $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $< $(SERVER_LINK) $(filter-out %/libsigcore.a $<,$^) $(LDLIBS)

# sigserve with the test hooks (fault injection: POST /debug/fault; CPU models in a device process):
# tests only, never installed or shipped.
$(BUILD)/obj/service/main-test.o: service/main.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(CFLAGS) -DSIGSERVE_TEST_HOOKS -fPIC -c $< -o $@

$(BUILD)/sigserve-test: $(BUILD)/obj/service/main-test.o $(BUILD)/obj/tests/mailbox_backend.o $(BUILD)/libsigcore.a \
                       $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SERVER_LINK) $(filter-out %.o %/libsigcore.a,$^) $(LDLIBS)

$(BUILD)/sigclient: $(BUILD)/obj/clients/sigclient_cli.o $(BUILD)/libsigclient.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $^ $(CLIENT_LIBS)

$(BUILD)/sigload: $(SIGLOAD_OBJ) $(BUILD)/libsigclient.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $^ $(CLIENT_LIBS)

$(BUILD)/green-probe: tools/green-probe.cu kernels/sig_device.cuh kernels/sig_common.h
	$(call quiet,NVCC,$<)$(NVCC) -O2 -std=c++17 $(CUDA_ARCH) -Ikernels -o $@ $< -lnvrtc

$(BUILD)/%: tools/%.cu kernels/lstm_persistent_device.cuh kernels/sig_device.cuh kernels/sig_common.h kernels/sig_lstm.h \
           kernels/sig_spec.h
	$(call quiet,NVCC,$<)$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -Ikernels -o $@ $<

$(BUILD)/%: $(BUILD)/obj/tools/%.o $(BUILD)/libsigsupport.a $(BUILD)/libsigcore.a $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The benchmarks call the CUDA backend's own functions, and rnncheck reaches it through the backends
# table without the executable's symbols that libsigserve-cuda.so needs: it is linked in (the others
# open it as sigserve does).
$(BUILD)/sigbench: $(SIGBENCH_OBJ)
$(BUILD)/lstmbench: $(LSTMBENCH_OBJ)
$(BUILD)/rnncheck: $(BUILD)/obj/tools/rnncheck.o
$(BUILD)/sigbench $(BUILD)/lstmbench $(BUILD)/rnncheck: $(BUILD)/libsigsupport.a $(if $(GPU_STATIC),$(BUILD)/libsigcuda.a) \
                                      $(BUILD)/libsigcore.a $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libsigsupport.a $(GPU_STATIC) \
	    $(filter-out %.o %/libsigsupport.a %/libsigcuda.a,$^) $(LDLIBS) $(CUDA_LDLIBS) $(if $(filter %/sigbench,$@),$(SIGBENCH_LIBS))

# Every suite links testutil.o (shared helpers) and the kernel checks' error bounds (tolerance.o, and
# tolerance_<type>.o for a model type with bounds of its own).
TOLERANCE_OBJ := $(patsubst tests/%.c,$(BUILD)/obj/tests/%.o,$(wildcard tests/tolerance*.c))
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/testutil.o $(TOLERANCE_OBJ) \
                  $(HISTOGRAM_OBJ) $(BUILD)/libsigsupport.a $(BUILD)/libsigclient.a $(if $(GPU_STATIC),$(BUILD)/libsigcuda.a) \
                  $(BUILD)/libsigcore.a $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a
	@mkdir -p $(dir $@)
	$(call quiet,LINK,$@)$(CC) $(LDFLAGS) -o $@ $(filter-out %/libsigcuda.a %/libsigcore.a %/libsigzmtp.a %/libsigcommon.a,$^) $(GPU_STATIC) \
	    $(BUILD)/libsigcore.a $(BUILD)/libsigzmtp.a $(BUILD)/libsigcommon.a $(CHECK_LIBS) $(LDLIBS) $(CUDA_LDLIBS)

# Counts the allocations sigserve's own code makes (tests/test_noalloc.c wraps them).
$(BUILD)/tests/test_noalloc: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign
# And those a backend's hot path makes (test_gru: none in infer, stream_step, stream_advance; test_cpu_split:
# none in a split call, on either core).
$(BUILD)/tests/test_gru $(BUILD)/tests/test_cpu_split: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign
# Holds the workers' wake-ups, so admitted jobs stay queued until the test lets them run (the dispatch
# suites: tests/dispatch_tests.h).
$(BUILD)/tests/test_dispatch $(BUILD)/tests/test_dispatch_fronts: LDFLAGS += -Wl,--wrap=waker_wake,--wrap=waker_sleep
# Starts device processes of this build's server in process (serving/placement_devices.c): it runs sigserve.
$(BUILD)/tests/test_placement: | $(BUILD)/sigserve

# The demo model's weights: generated deterministically, so the service runs with no user files.
$(DEMO): $(BUILD)/gen_demo_weights
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)$(BUILD)/gen_demo_weights $@ >/dev/null

clean:
	rm -rf $(BUILD)

# Targets of one concern each (fuzzing, deployment, installation) live in mk/.
include $(wildcard mk/*.mk)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
