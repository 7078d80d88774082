# Fuzzing with libFuzzer (clang, -fsanitize=fuzzer,address,undefined): the request decoder, the
# safetensors reader and the config parser, each a target in tests/fuzz/ with a seed corpus in
# tests/fuzz/corpus/<target>/ and, where it helps, a dictionary tests/fuzz/<target>.dict.
#
#   make fuzz            build the targets into $(BUILD)/fuzz/ and fuzz each for FUZZ_SECONDS
#   make fuzz-smoke      the same for 10 s a target (CI)
#   make fuzz-build      only build them
#   make fuzz-clean      forget what earlier runs found ($(BUILD)/fuzz/)
#
# Each target runs on $(BUILD)/fuzz/corpus-<target>, a copy of its seeds that keeps what earlier
# runs found; the seeds in the repository are never written. A crash fails the make and says where
# the input was written ($(BUILD)/fuzz/artifacts-<target>/); copy it into the seed corpus under a
# name that says what it is, and add a regression test. Without clang or its libFuzzer runtime,
# `make fuzz` prints SKIP and why, and succeeds.

FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 60
# How many targets fuzz at the same time (each is one process on one core).
FUZZ_JOBS     ?= 1
FUZZ_DIR      := $(BUILD)/fuzz
FUZZ_TARGETS  := request safetensors config curve
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all
# Evaluated when used, so that other targets do not run pkg-config for them.
FUZZ_CFLAGS    = -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -MMD -MP -Icommon -Itransport $(SERVICE_INC) \
                 -I$(BUILD)/gen $(shell pkg-config --cflags libprotobuf-c libcjson 2>/dev/null) $(FUZZ_SAN)
FUZZ_LIBS      = $(shell pkg-config --libs libprotobuf-c libcjson 2>/dev/null || echo -lprotobuf-c -lcjson) -lsodium -lm

# What each target compiles, and the longest input it is given (the codec target is built for
# 8 KiB messages; the seeds of the other two are under 8 KB).
FUZZ_SRC_request     := tests/fuzz/fuzz_request.c service/front/codec.c service/base/status.c common/arena.c
FUZZ_SRC_safetensors := tests/fuzz/fuzz_safetensors.c service/weights/safetensors.c service/weights/safetensors_read.c service/base/status.c
FUZZ_SRC_config      := tests/fuzz/fuzz_config.c service/base/config.c service/base/config_walk.c service/base/config_file.c service/base/model_type.c service/base/cuda_kernel.c service/base/status.c
FUZZ_MAX_LEN_request     := 8192
FUZZ_MAX_LEN_safetensors := 8192
FUZZ_SRC_curve       := tests/fuzz/fuzz_curve.c transport/zmtp_curve.c transport/zmtp_wire.c
FUZZ_MAX_LEN_config      := 8192
FUZZ_MAX_LEN_curve       := 4096
FUZZ_TARGETS         += zmtp
FUZZ_SRC_zmtp        := tests/fuzz/fuzz_zmtp.c transport/zmtp_conn.c transport/zmtp_conn_read.c transport/zmtp_wire.c transport/zmtp_curve.c
FUZZ_MAX_LEN_zmtp    := 8192

fuzz_obj = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(1))
FUZZ_PROTO_OBJ := $(FUZZ_DIR)/obj/gen/signal.pb-c.o
FUZZ_BINS := $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t))

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-run fuzz-clean

fuzz:
	@if why=$$(./tests/fuzz/fuzz.sh probe '$(FUZZ_CC)' '$(FUZZ_DIR)'); then \
	    $(MAKE) --no-print-directory fuzz-run; \
	else \
	    echo "SKIP: fuzzing needs clang with libFuzzer ($$why)"; \
	fi

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

# One line "target max_len" each; xargs fails when any run does.
fuzz-run: $(FUZZ_BINS)
	@printf '%s %s\n' $(foreach t,$(FUZZ_TARGETS),$(t) $(FUZZ_MAX_LEN_$(t))) | \
	    xargs -P $(FUZZ_JOBS) -L 1 ./tests/fuzz/fuzz.sh run '$(FUZZ_DIR)' '$(FUZZ_SECONDS)'

fuzz-build: $(FUZZ_BINS)

fuzz-clean:
	rm -rf $(FUZZ_DIR)

# Instrumented objects (coverage via fuzzer-no-link); the runtime comes in at the link. -Werror
# for the targets only: a warning that clang gives and gcc does not, in the code under test, should
# not stop its fuzzing (the gcc build has -Werror).
$(FUZZ_DIR)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(call quiet,CLANG,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) $(if $(filter tests/fuzz/%,$<),-Werror) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_PROTO_OBJ): $(PROTO_C) $(PROTO_H)
	@mkdir -p $(dir $@)
	$(call quiet,CLANG,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Wno-unused-parameter -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_request: $(call fuzz_obj,$(FUZZ_SRC_request)) $(FUZZ_PROTO_OBJ)
$(FUZZ_DIR)/fuzz_safetensors: $(call fuzz_obj,$(FUZZ_SRC_safetensors))
$(FUZZ_DIR)/fuzz_config: $(call fuzz_obj,$(FUZZ_SRC_config))
$(FUZZ_DIR)/fuzz_zmtp: $(call fuzz_obj,$(FUZZ_SRC_zmtp))
$(FUZZ_DIR)/fuzz_curve: $(call fuzz_obj,$(FUZZ_SRC_curve))
$(FUZZ_BINS):
	$(call quiet,LINK,$@)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(FUZZ_LIBS)

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
