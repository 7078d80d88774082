# The deployment checks on their own: `make test-deploy` runs tests/deploy/test_*.sh (make install and
# pkg-config, man pages, the shipped configs, the systemd unit and sd_notify, the Kubernetes manifests
# and `podman kube play` of them, compose and the container images), each of which prints SKIP with
# the reason where its tool is missing (no docker or podman, no kubernetes-validate, ...). `make test`
# runs them too, through tests/run.sh. The images the tests build are theirs alone: tags of the run
# (sigserve-test:cpu-RUN, ...), removed at the end with every image their builds created, which the
# last line ("images") checks (tests/deploy/images.sh).
#
#   make test-deploy                          all of them
#   make test-deploy DEPLOY_TESTS=k8s         only tests/deploy/test_k8s.sh (names without test_ and .sh)

DEPLOY_TESTS ?= $(patsubst tests/deploy/test_%.sh,%,$(wildcard tests/deploy/test_*.sh))

.PHONY: test-deploy

test-deploy: $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload $(DEMO)
	@mkdir -p $(BUILD)/tests
	@export SIGSERVE_TEST_IMAGES=$(BUILD)/tests/images; \
	BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/deploy/images.sh begin $$SIGSERVE_TEST_IMAGES >$(BUILD)/tests/deploy_images_begin.log 2>&1 || \
	    cat $(BUILD)/tests/deploy_images_begin.log; \
	failed=""; for t in $(DEPLOY_TESTS); do \
	    log=$(BUILD)/tests/deploy_$$t.log; start=$$(date +%s); \
	    if BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/deploy/test_$$t.sh >$$log 2>&1; then \
	        if grep -q '^SKIP:' $$log; then echo "SKIP  $$t ($$(grep '^SKIP:' $$log | head -n 1 | cut -c7-))"; \
	        else echo "PASS  $$t  $$(tail -n 1 $$log) ($$(( $$(date +%s) - start ))s)"; fi; \
	    else echo "FAIL  $$t"; tail -n 30 $$log; failed="$$failed $$t"; fi; \
	done; \
	log=$(BUILD)/tests/deploy_images.log; \
	if BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/deploy/images.sh end $$SIGSERVE_TEST_IMAGES >$$log 2>&1; then \
	    if grep -q '^SKIP:' $$log; then echo "SKIP  images ($$(grep '^SKIP:' $$log | head -n 1 | cut -c7-))"; \
	    else echo "PASS  images  $$(tail -n 1 $$log)"; fi; \
	else echo "FAIL  images"; tail -n 30 $$log; failed="$$failed images"; fi; \
	if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi
