# The two commands (see README.md). Both install missing Debian packages (as root) and build.
#   make run    build, start regcached on the simulated device, run a short demo against it
#   make test   build and run every test label this machine can run (says what it skipped)
.PHONY: run test

run:
	@deploy/install-deps.sh
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $$(nproc)
	@deploy/run-demo.sh build/release

test:
	@tests/run_tests.sh
