# Installation: `make install` (PREFIX, DESTDIR and the directories below), `make uninstall`, and
# the man pages: sigserve(1), sigclient(1) and sigload(1) are generated from the programs' --help and
# kept in man/ (`make man`, `make man-check`); sigserve.json(5) and libsigclient(3) are generated at
# build time from the references they repeat, config/README.md (man/md2man.py) and the comments of
# clients/sigclient.h (man/h2man.py), so they cannot fall behind them. The build puts every page in
# $(BUILD)/man/ (man/*.1 copied there), which is what is installed, and what to read before
# installing: `man -l build/man/sigserve.1`.
#
#   make install                                  binaries, library, header, pkg-config file, default
#                                                 config and demo model, man pages, systemd unit
#   make install PREFIX=/usr DESTDIR=/tmp/stage   staged, as a package build does
#
# What goes where (PREFIX=/usr/local by default):
#   $(BINDIR)          sigserve sigclient sigload
#   $(BINDIR)/../lib/sigserve   libsigserve-cuda.so (a CUDA build: the CUDA backend, which sigserve opens
#                      from there when a model needs the GPU)
#   $(LIBDIR)          libsigclient.so.$(VERSION), its SONAME link libsigclient.so.$(SIGCLIENT_SOVERSION),
#                      the development link libsigclient.so, libsigclient.a, pkgconfig/libsigclient.pc
#   $(INCLUDEDIR)      sigclient.h
#   $(DATADIR)         sigserve.json (the default config) and models/tick_mlp.safetensors (the demo)
#   $(SYSCONFDIR)/sigserve/sigserve.json
#                      the config the systemd unit starts with: the default, installed only when
#                      there is none yet (an operator's config is never overwritten). It listens on
#                      SIGSERVE_ENDPOINT, loopback unless told otherwise: plaintext on every
#                      interface is a choice to make knowingly (docs/security.md); the image's
#                      build sets tcp://*:5555, where the container's own network is what it binds
#   $(MANDIR)/man1     sigserve.1 sigclient.1 sigload.1
#   $(MANDIR)/man5     sigserve.json.5;  $(MANDIR)/man3: libsigclient.3
#   $(SYSTEMDUNITDIR)  sigserve.service; $(SYSUSERSDIR)/sigserve.conf (the sigserve user)
#
# libsigclient.so exports the sigclient_* functions only (a version script), so a program that
# carries its own copy of the protobuf-c code for signal.proto does not clash with the library's.
# The SONAME follows VERSION's major number: libsigclient.so.0 for 0.x.y.

PREFIX         ?= /usr/local
DESTDIR        ?=
BINDIR         ?= $(PREFIX)/bin
LIBDIR         ?= $(PREFIX)/lib
INCLUDEDIR     ?= $(PREFIX)/include
DATADIR        ?= $(PREFIX)/share/sigserve
MANDIR         ?= $(PREFIX)/share/man
PKGCONFIGDIR   ?= $(LIBDIR)/pkgconfig
SYSCONFDIR     ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
# "text" suits the journal; the container image sets "json".
SIGSERVE_LOG_FORMAT ?= text
# Where the installed config listens; the container image sets tcp://*:5555.
SIGSERVE_ENDPOINT   ?= tcp://127.0.0.1:5555
INSTALL        ?= install

SIGCLIENT_SOVERSION := $(firstword $(subst ., ,$(VERSION)))
SIGCLIENT_SONAME    := libsigclient.so.$(SIGCLIENT_SOVERSION)
SIGCLIENT_SOFILE    := $(BUILD)/libsigclient.so.$(VERSION)
SIGCLIENT_MAP       := $(BUILD)/libsigclient.map
SIGCLIENT_PC        := $(BUILD)/libsigclient.pc
SIGSERVE_CONFIG     := $(BUILD)/deploy/sigserve.json
SIGSERVE_UNIT       := $(BUILD)/deploy/sigserve.service
MAN_PAGES           := $(patsubst man/%,$(BUILD)/man/%,$(wildcard man/*.1))
MAN5_PAGE           := $(BUILD)/man/sigserve.json.5
MAN3_PAGE           := $(BUILD)/man/libsigclient.3
INSTALL_DEPS        := $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload $(BUILD)/libsigclient.a \
                       $(SIGCLIENT_SOFILE) $(SIGCLIENT_PC) $(DEMO) $(SIGSERVE_CONFIG) $(SIGSERVE_UNIT) \
                       $(MAN5_PAGE) $(MAN3_PAGE) $(GPU_PLUGIN)

# Written by the recipes from the values of this make run: a change of PREFIX or VERSION must
# rewrite them, so they are always remade (cheap) and only replaced when their text changes.
.PHONY: install install-man uninstall man man-check FORCE-INSTALL-TEXT

all: $(MAN_PAGES) $(MAN5_PAGE) $(MAN3_PAGE)

# The section 1 pages, kept in man/ (`make man`), beside the others.
$(BUILD)/man/%.1: man/%.1
	@mkdir -p $(dir $@)
	cp $< $@

# The pages made from the references they repeat (see the top of this file).
$(MAN5_PAGE): config/README.md man/md2man.py VERSION
	@mkdir -p $(dir $@)
	$(call quiet,MAN,$@)$(PYTHON) man/md2man.py config/README.md $(VERSION) $@

$(MAN3_PAGE): clients/sigclient.h man/h2man.py VERSION
	@mkdir -p $(dir $@)
	$(call quiet,MAN,$@)$(PYTHON) man/h2man.py clients/sigclient.h $(VERSION) $@

# The shared library, with its SONAME and the exported symbols limited to the API.
$(SIGCLIENT_MAP):
	@mkdir -p $(dir $@)
	@printf '{\n  global: sigclient_*;\n  local: *;\n};\n' > $@

$(SIGCLIENT_SOFILE): $(CLIENT_OBJ) $(SIGCLIENT_MAP)
	$(call quiet,LINK,$@)$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SIGCLIENT_SONAME) -Wl,--version-script,$(SIGCLIENT_MAP) \
	    -o $@ $(CLIENT_OBJ) $(CLIENT_LIBS)
	@ln -sf $(notdir $@) $(BUILD)/$(SIGCLIENT_SONAME)

# libdir and includedir relative to ${prefix} when they are under it, so that the file can be
# relocated (PKG_CONFIG_SYSROOT_DIR, pkg-config --define-prefix).
pc_dir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
$(SIGCLIENT_PC): FORCE-INSTALL-TEXT
	@mkdir -p $(dir $@)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(call pc_dir,$(LIBDIR))' 'includedir=$(call pc_dir,$(INCLUDEDIR))' '' \
	    'Name: libsigclient' \
	    'Description: C client of sigserve, the ZeroMQ inference service for market signals' \
	    'URL: https://github.com/sigserve/sigserve' \
	    'Version: $(VERSION)' \
	    'Requires.private: libzmq libsodium libprotobuf-c' \
	    'Libs: -L$${libdir} -lsigclient' \
	    'Libs.private: -lpthread -lm' \
	    'Cflags: -I$${includedir}' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; echo "wrote $@"; fi

$(SIGSERVE_CONFIG): deploy/sigserve.json.in FORCE-INSTALL-TEXT
	@mkdir -p $(dir $@)
	@sed -e 's|@DATADIR@|$(DATADIR)|g' -e 's|@LOG_FORMAT@|$(SIGSERVE_LOG_FORMAT)|g' \
	     -e 's|@ENDPOINT@|$(SIGSERVE_ENDPOINT)|g' $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; echo "wrote $@"; fi

$(SIGSERVE_UNIT): deploy/systemd/sigserve.service FORCE-INSTALL-TEXT
	@mkdir -p $(dir $@)
	@sed -e 's|/usr/local/bin/sigserve|$(BINDIR)/sigserve|g' \
	     -e 's|/etc/sigserve/sigserve.json|$(SYSCONFDIR)/sigserve/sigserve.json|g' $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; echo "wrote $@"; fi

FORCE-INSTALL-TEXT:

install: $(INSTALL_DEPS) install-man
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(INCLUDEDIR) \
	    $(DESTDIR)$(DATADIR)/models $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	    $(DESTDIR)$(SYSCONFDIR)/sigserve
	$(INSTALL) -m 0755 $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload $(DESTDIR)$(BINDIR)/
	$(if $(GPU_PLUGIN),$(INSTALL) -d $(DESTDIR)$(BINDIR)/../lib/sigserve && \
	    $(INSTALL) -m 0755 $(GPU_PLUGIN) $(DESTDIR)$(BINDIR)/../lib/sigserve/)
	$(INSTALL) -m 0755 $(SIGCLIENT_SOFILE) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SIGCLIENT_SOFILE)) $(DESTDIR)$(LIBDIR)/$(SIGCLIENT_SONAME)
	ln -sf $(SIGCLIENT_SONAME) $(DESTDIR)$(LIBDIR)/libsigclient.so
	$(INSTALL) -m 0644 $(BUILD)/libsigclient.a $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 0644 $(SIGCLIENT_PC) $(DESTDIR)$(PKGCONFIGDIR)/libsigclient.pc
	$(INSTALL) -m 0644 clients/sigclient.h $(DESTDIR)$(INCLUDEDIR)/
	$(INSTALL) -m 0644 $(SIGSERVE_CONFIG) $(DESTDIR)$(DATADIR)/sigserve.json
	$(INSTALL) -m 0644 $(DEMO) $(DESTDIR)$(DATADIR)/models/
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/sigserve/sigserve.json ]; then \
	    echo "kept $(DESTDIR)$(SYSCONFDIR)/sigserve/sigserve.json (the default is $(DATADIR)/sigserve.json)"; \
	else \
	    echo "$(INSTALL) -m 0644 $(SIGSERVE_CONFIG) $(DESTDIR)$(SYSCONFDIR)/sigserve/sigserve.json"; \
	    $(INSTALL) -m 0644 $(SIGSERVE_CONFIG) $(DESTDIR)$(SYSCONFDIR)/sigserve/sigserve.json; \
	fi
	$(INSTALL) -m 0644 $(SIGSERVE_UNIT) $(DESTDIR)$(SYSTEMDUNITDIR)/sigserve.service
	$(INSTALL) -m 0644 deploy/systemd/sigserve.sysusers $(DESTDIR)$(SYSUSERSDIR)/sigserve.conf
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then ldconfig; fi

# The manual alone (make install does it too): tests/deploy/test_man.sh reads it through MANPATH.
install-man: $(MAN_PAGES) $(MAN5_PAGE) $(MAN3_PAGE)
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5
	$(INSTALL) -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 $(MAN3_PAGE) $(DESTDIR)$(MANDIR)/man3/
	$(INSTALL) -m 0644 $(MAN5_PAGE) $(DESTDIR)$(MANDIR)/man5/

# The config in SYSCONFDIR is the operator's: left in place.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,sigserve sigclient sigload)
	rm -rf $(DESTDIR)$(BINDIR)/../lib/sigserve
	rm -f $(DESTDIR)$(LIBDIR)/libsigclient.so $(DESTDIR)$(LIBDIR)/$(SIGCLIENT_SONAME) \
	      $(DESTDIR)$(LIBDIR)/$(notdir $(SIGCLIENT_SOFILE)) $(DESTDIR)$(LIBDIR)/libsigclient.a \
	      $(DESTDIR)$(PKGCONFIGDIR)/libsigclient.pc $(DESTDIR)$(INCLUDEDIR)/sigclient.h
	rm -rf $(DESTDIR)$(DATADIR)
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN_PAGES))) \
	      $(DESTDIR)$(MANDIR)/man3/libsigclient.3 $(DESTDIR)$(MANDIR)/man5/sigserve.json.5
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/sigserve.service $(DESTDIR)$(SYSUSERSDIR)/sigserve.conf

# The man pages say what --help says (man/gen-man.py); regenerate after changing a usage text.
man: $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload
	$(PYTHON) man/gen-man.py $(BUILD) $(VERSION)

man-check: $(BUILD)/sigserve $(BUILD)/sigclient $(BUILD)/sigload
	$(PYTHON) man/gen-man.py --check $(BUILD) $(VERSION)
