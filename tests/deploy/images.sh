#!/bin/sh
# The container images of the deploy tests (test_image.sh, test_compose.sh, test_k8s.sh) over one
# run of them. The user's image store is not the tests' to rearrange: they build under tags of
# their run only, sigserve-test:cpu-RUN, cuda-RUN and build-deps-RUN, never sigserve:* (what
# `make image` builds for the user), record every image their builds create, and at the end remove
# their tags and those images and nothing else. Images that were there before (the cache a
# `make image` keeps, other projects' images, another checkout's build) serve as cache and stay.
# With podman's vfs storage every build step is a full copy of the image, so the removal is what
# keeps make test from filling the disk.
#
#   images.sh begin DIR           start a run recorded in DIR (tests/run.sh and `make test-deploy`
#                                 export it as SIGSERVE_TEST_IMAGES; a test started alone makes its
#                                 own). Plants two images the run must leave alone: the tag
#                                 sigserve-unrelated:RUN on the base image, and an untagged image
#                                 labelled io.sigserve.image, as another checkout's build leaves one.
#                                 A DIR left by an interrupted run is cleaned up first.
#   images.sh build DIR cpu|cuda  build that image for the run (the first call; later ones reuse it)
#                                 and print its tag
#   images.sh end DIR             remove the run's tags and images; check that none is left, that the
#                                 planted images and any sigserve:cpu / sigserve:cuda are as they were
#                                 at begin; then remove the planted ones
#
# While working on a test, keep a run's images across tries:
#   sh tests/deploy/images.sh begin /tmp/r
#   SIGSERVE_TEST_IMAGES=/tmp/r sh tests/deploy/test_image.sh       (as often as needed)
#   sh tests/deploy/images.sh end /tmp/r
#
# What a build created is told apart from what another build running at the same time on the same
# store created: an image counts as the run's when it is new since the build started and the
# build's own log names its ID (podman and docker print one per step; BuildKit makes none but the
# final image, whose ID the tag gives).
set -eu
. tests/deploy/lib.sh
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: tests/deploy/images.sh begin|build|end DIR [cpu|cuda]" >&2; exit 2; }
base=${DEBIAN_IMAGE:-debian:bookworm-slim}

find_engine () {
    if docker info >/dev/null 2>&1; then echo docker
    elif podman info >/dev/null 2>&1; then echo podman
    fi
}

image_id () { $engine image inspect --format '{{.Id}}' "$1" 2>/dev/null | sed 's/^sha256://' || true; }
all_ids () { $engine images -a --no-trunc -q | sed 's/^sha256://' | sort -u; }

# remove_run: the run's tags, then the images its builds created; prints what could not go.
remove_run () {
    [ -f "$dir/tags" ] && for t in $(sort -u "$dir/tags"); do
        [ -n "$(image_id "$t")" ] && $engine rmi "$t" >/dev/null 2>&1 || true
    done
    [ -f "$dir/built" ] || return 0
    # Children before parents: retry while something goes.
    left=$(sort -u "$dir/built")
    while :; do
        before=$left
        left=""
        for id in $before; do
            [ -n "$(image_id "$id")" ] || continue
            # Tagged by someone else since (a make image that found it in its cache): theirs now.
            others=$($engine image inspect --format '{{range .RepoTags}}{{.}} {{end}}' "$id" 2>/dev/null || true)
            if [ -n "$others" ]; then echo "note: kept $id, tagged since by someone else: $others" >&2; continue; fi
            $engine rmi "$id" >/dev/null 2>"$dir/rmi.err" || left="$left $id"
        done
        [ -n "$left" ] && [ "$left" != "$before" ] || break
    done
    for id in $left; do
        echo "$id $(tr '\n' ' ' <"$dir/rmi.err" 2>/dev/null)"
    done
}

case $cmd in
begin)
    if [ -f "$dir/run" ]; then
        # A run that was interrupted before its end: its images would stay forever.
        . "$dir/run"
        if [ -n "$engine" ]; then
            left=$(remove_run)
            echo "note: removed what the interrupted run $run left${left:+ (still there: $left)}"
            [ -n "$unrelated_id" ] && $engine rmi "$unrelated_id" >/dev/null 2>&1 || true
            [ -n "$(image_id "sigserve-unrelated:$run")" ] && $engine rmi "sigserve-unrelated:$run" >/dev/null 2>&1 || true
        fi
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    engine=$(find_engine)
    run=$(date +%Y%m%d-%H%M%S)-$$
    base_id=; unrelated_id=; cpu_id=; cuda_id=
    if [ -n "$engine" ]; then
        base_id=$(image_id "$base")
        if [ -n "$base_id" ]; then
            $engine tag "$base_id" "sigserve-unrelated:$run"
            mkdir -p "$dir/unrelated"
            printf 'FROM %s\nLABEL io.sigserve.image=unrelated\n' "$base_id" >"$dir/unrelated/Dockerfile"
            $engine build -q --network host --iidfile "$dir/unrelated.iid" "$dir/unrelated" >"$dir/unrelated.log" 2>&1 ||
                { cat "$dir/unrelated.log"; fail "could not build the untagged image the run must leave alone"; }
            unrelated_id=$(sed 's/^sha256://' "$dir/unrelated.iid")
        fi
        cpu_id=$(image_id sigserve:cpu)
        cuda_id=$(image_id sigserve:cuda)
    fi
    printf 'engine=%s\nrun=%s\nbase_id=%s\nunrelated_id=%s\ncpu_id=%s\ncuda_id=%s\n' \
        "$engine" "$run" "$base_id" "$unrelated_id" "$cpu_id" "$cuda_id" >"$dir/run"
    echo "run $run${engine:+ with $engine}"
    ;;
build)
    target=${3:-}
    case $target in cpu|cuda) ;; *) echo "images.sh build DIR cpu|cuda" >&2; exit 2 ;; esac
    [ -f "$dir/run" ] || fail "no run recorded in $dir (tests/deploy/images.sh begin)"
    . "$dir/run"
    [ -n "$engine" ] || fail "no container engine answered when the run began"
    tag=sigserve-test:$target-$run
    if [ -f "$dir/$target.done" ]; then echo "$tag"; exit 0; fi
    if [ -f "$dir/$target.failed" ]; then
        tail -n 40 "$dir/$target.log" >&2
        fail "the $target image failed to build earlier in this run"
    fi
    printf '%s\nsigserve-test:build-deps-%s\n' "$tag" "$run" >>"$dir/tags"
    all_ids >"$dir/$target.before"
    start=$(date +%s)
    rc=0
    make_build "image-$target" IMAGE_ENGINE="$engine" IMAGE_PRUNE=0 IMAGE_DEPS_TAG="sigserve-test:build-deps-$run" \
        IMAGE_CPU_TAGS="sigserve-test:cpu-$run" IMAGE_CUDA_TAGS="sigserve-test:cuda-$run" >"$dir/$target.log" 2>&1 || rc=$?
    all_ids >"$dir/$target.after"
    final=$(image_id "$tag")
    comm -13 "$dir/$target.before" "$dir/$target.after" | while read -r id; do
        if [ "$id" = "$final" ] || grep -q "$(echo "$id" | cut -c1-11)" "$dir/$target.log"; then echo "$id"; fi
    done >>"$dir/built"
    if [ "$rc" != 0 ]; then
        touch "$dir/$target.failed"
        tail -n 40 "$dir/$target.log" >&2
        fail "make image-$target (tagged $tag) failed"
    fi
    echo $(( $(date +%s) - start )) >"$dir/$target.seconds"
    touch "$dir/$target.done"
    echo "$tag"
    ;;
end)
    [ -f "$dir/run" ] || skip "no run recorded in $dir"
    . "$dir/run"
    [ -n "$engine" ] || skip "no container engine answered when the run began"
    built=0; [ -f "$dir/built" ] && built=$(sort -u "$dir/built" | wc -l)
    left=$(remove_run)
    tags=$($engine images --format '{{.Repository}}:{{.Tag}}' | grep -- "-$run\$" || true)
    [ -z "$tags" ] || fail "tags of this run are left: $tags"
    [ -z "$left" ] || fail "images this run built are left:
$left"
    ok "removed the run's tags (sigserve-test:*-$run) and the $built images its builds created; none is left"
    [ -z "$base_id" ] || [ "$(image_id "sigserve-unrelated:$run")" = "$base_id" ] ||
        fail "the tag sigserve-unrelated:$run (on $base) was changed or removed by the run"
    [ -z "$unrelated_id" ] || [ -n "$(image_id "$unrelated_id")" ] ||
        fail "the untagged image labelled io.sigserve.image that the run did not build ($unrelated_id) was removed"
    for t in cpu cuda; do
        eval "was=\$${t}_id"
        [ -n "$was" ] || continue
        now=$(image_id "sigserve:$t")
        [ "$now" = "$was" ] || fail "sigserve:$t was $was before the run and is '${now:-gone}' after: the tests must not touch the user's images (or a make image ran at the same time)"
    done
    ok "left alone: a tag of another name on the base image, an untagged sigserve build image of someone else${cpu_id:+, sigserve:cpu}${cuda_id:+, sigserve:cuda}"
    [ -z "$unrelated_id" ] || $engine rmi "$unrelated_id" >/dev/null 2>&1 || true
    [ -z "$base_id" ] || $engine rmi "sigserve-unrelated:$run" >/dev/null 2>&1 || true
    rm -rf "$dir"
    done_checks "test images of run $run"
    ;;
*)
    echo "usage: tests/deploy/images.sh begin|build|end DIR [cpu|cuda]" >&2; exit 2 ;;
esac
