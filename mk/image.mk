# Container images (deploy/Dockerfile): `make image` builds $(IMAGE_NAME):cpu, and
# $(IMAGE_NAME):cuda where this build has CUDA (nvcc found), with docker when `docker info`
# answers, else with podman (--format docker, so HEALTHCHECK is kept). No engine: it says so and
# fails; tests/deploy/test_image.sh prints SKIP instead.
#
#   make image                    both images (cuda only with a CUDA build)
#   make image-cpu / image-cuda   one of them
#   make image-size               their sizes
#   make image-prune              remove what earlier builds left: untagged images labelled
#                                 io.sigserve.image older than IMAGE_PRUNE_AGE (10m), so the cache of
#                                 the build just made stays, and the tagged build-deps layer always
#   IMAGE_PRUNE=0                 do not prune after a build (it does by default: with podman's vfs
#                                 storage every step is a full copy of the image, gigabytes a build)
#   IMAGE_ENGINE=podman           choose the engine
#   IMAGE_CPU_TAGS=... IMAGE_CUDA_TAGS=... IMAGE_DEPS_TAG=...
#                                 the tags (default $(IMAGE_NAME):cpu and :$(VERSION)-cpu, the same
#                                 for cuda, and :build-deps). The deploy tests build under tags of
#                                 their own, sigserve-test:cpu-RUN and so on, with IMAGE_PRUNE=0, and
#                                 remove exactly what they built (tests/deploy/images.sh): make test
#                                 never retags or prunes the user's images
#   IMAGE_BUILD_FLAGS=...         extra flags for `build` (default --network host: the build stage
#                                 reaches Debian's archive through the host's network)
#   DEBIAN_IMAGE=...              the base (default debian:bookworm-slim; deploy/build-base.sh
#                                 builds it from a local Debian mirror for air-gapped hosts)
#
# The build context is staged in $(IMAGE_CONTEXT), not the repository: deploy/install-deps.sh (its
# own layer, the slow one), src/ (the files `make install` reads, of those git knows: tracked, or
# untracked and not ignored; build folders and docs stay out) and, for the cuda image, cuda/ (this
# build's sigserve and the CUDA libraries it loads from the toolkit, found with ldd).

IMAGE_NAME        ?= sigserve
IMAGE_ENGINE      ?= $(shell if docker info >/dev/null 2>&1; then echo docker; \
                             elif podman info >/dev/null 2>&1; then echo podman; fi)
IMAGE_BUILD_FLAGS ?= --network host
DEBIAN_IMAGE      ?= debian:bookworm-slim
IMAGE_CONTEXT     := $(BUILD)/image/context
IMAGE_PRUNE       ?= 1
IMAGE_PRUNE_AGE   ?= 10m
IMAGE_CPU_TAGS    ?= $(IMAGE_NAME):cpu $(IMAGE_NAME):$(VERSION)-cpu
IMAGE_CUDA_TAGS   ?= $(IMAGE_NAME):cuda $(IMAGE_NAME):$(VERSION)-cuda
IMAGE_DEPS_TAG    ?= $(IMAGE_NAME):build-deps
IMAGE_FORMAT       = $(if $(filter podman,$(IMAGE_ENGINE)),--format docker)
IMAGE_BUILD        = $(IMAGE_ENGINE) build $(IMAGE_FORMAT) $(IMAGE_BUILD_FLAGS) --build-arg DEBIAN_IMAGE=$(DEBIAN_IMAGE) \
                     --build-arg VERSION=$(VERSION) -f deploy/Dockerfile

.PHONY: image image-cpu image-cuda image-context image-size image-engine image-deps image-prune

image: image-cpu $(if $(HAVE_CUDA),image-cuda)

image-engine:
	@if [ -z "$(IMAGE_ENGINE)" ]; then \
	    echo "make image: neither 'docker info' nor 'podman info' answers: start Docker, or install podman" \
	         "(on the project's machines: ../shared/tools/oci-setup.sh)" >&2; exit 1; fi

# What the build stage needs (config/README.md: make install generates sigserve.json(5) from it);
# everything else stays out of the image's cache key.
IMAGE_SOURCES := Makefile VERSION mk proto common transport support service kernels clients tools man \
                 deploy/install-deps.sh deploy/sigserve.json.in deploy/systemd config/README.md

# Rebuilt on every run (cheap): the engines cache by content, so an unchanged file costs nothing.
image-context:
	@rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/src/deploy $(IMAGE_CONTEXT)/deploy
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	    git ls-files -z --cached --others --exclude-standard -- $(IMAGE_SOURCES) | \
	        tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C $(IMAGE_CONTEXT)/src; \
	else \
	    tar -cf - $(IMAGE_SOURCES) | tar -xf - -C $(IMAGE_CONTEXT)/src; \
	fi
	@cp deploy/install-deps.sh deploy/entrypoint.sh $(IMAGE_CONTEXT)/deploy/
	@test -f $(IMAGE_CONTEXT)/src/Makefile || { echo "make image-context: nothing staged in $(IMAGE_CONTEXT)/src" >&2; exit 1; }

# The installer's layer under a tag of its own: the cache that matters survives image-prune.
image-deps: image-engine image-context
	$(IMAGE_BUILD) --target deps -t $(IMAGE_DEPS_TAG) $(IMAGE_CONTEXT)

image-cpu: image-deps
	$(IMAGE_BUILD) --target cpu $(addprefix -t ,$(IMAGE_CPU_TAGS)) $(IMAGE_CONTEXT)
	@if [ "$(IMAGE_PRUNE)" = 1 ]; then $(MAKE) --no-print-directory image-prune; fi

# The host's CUDA build of sigserve, its CUDA backend (libsigserve-cuda.so, which sigserve opens when a
# model needs the GPU) and the toolkit libraries that backend loads (libnvrtc with the builtins library
# it opens at run time, for the specialised persistent kernels; not the driver's libcuda, which the
# NVIDIA container toolkit mounts from the host), laid out as they go in the image:
# cuda/usr/bin/sigserve, cuda/usr/lib/sigserve/libsigserve-cuda.so, and the libraries in the folder of
# the backend's RUNPATH.
image-cuda: image-deps $(BUILD)/sigserve $(GPU_PLUGIN)
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "make image-cuda: this build has no CUDA (nvcc not found, or NVCC=)" >&2; exit 1; fi
	@rm -rf $(IMAGE_CONTEXT)/cuda && mkdir -p $(IMAGE_CONTEXT)/cuda/usr/bin $(IMAGE_CONTEXT)/cuda/usr/lib/sigserve
	cp $(BUILD)/sigserve $(IMAGE_CONTEXT)/cuda/usr/bin/
	cp $(GPU_PLUGIN) $(IMAGE_CONTEXT)/cuda/usr/lib/sigserve/
	@runpath=$$(readelf -d $(GPU_PLUGIN) | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p' | cut -d: -f1); \
	if [ -z "$$runpath" ]; then echo "make image-cuda: $(GPU_PLUGIN) has no RUNPATH to its CUDA libraries" >&2; exit 1; fi; \
	libs=$$(ldd $(GPU_PLUGIN) | awk '$$3 ~ /\/lib(cudart|cublas|cublasLt|nvrtc)\.so/ {print $$3}'); \
	if [ -z "$$libs" ]; then echo "make image-cuda: $(GPU_PLUGIN) loads no CUDA library" >&2; exit 1; fi; \
	nvrtc=$$(ldd $(GPU_PLUGIN) | awk '$$3 ~ /\/libnvrtc\.so/ {print $$3}'); \
	if [ -z "$$nvrtc" ]; then echo "make image-cuda: $(GPU_PLUGIN) does not load libnvrtc" >&2; exit 1; fi; \
	libs="$$libs $$(ls $$(dirname $$nvrtc)/libnvrtc-builtins.so.* | grep -v alt | head -n 1)"; \
	mkdir -p $(IMAGE_CONTEXT)/cuda$$runpath; \
	for l in $$libs; do echo "cp -L $$l $(IMAGE_CONTEXT)/cuda$$runpath/"; cp -L $$l $(IMAGE_CONTEXT)/cuda$$runpath/; done
	$(IMAGE_BUILD) --target cuda $(addprefix -t ,$(IMAGE_CUDA_TAGS)) $(IMAGE_CONTEXT)
	@if [ "$(IMAGE_PRUNE)" = 1 ]; then $(MAKE) --no-print-directory image-prune; fi

image-size: image-engine
	@$(IMAGE_ENGINE) image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '(^|/)$(IMAGE_NAME):(cpu|cuda)\b' || true

# Untagged images of ours only (the label), never another project's.
image-prune: image-engine
	@$(IMAGE_ENGINE) image prune -f --filter label=io.sigserve.image --filter until=$(IMAGE_PRUNE_AGE) >/dev/null && \
	    echo "image-prune: removed untagged sigserve build images older than $(IMAGE_PRUNE_AGE)"
