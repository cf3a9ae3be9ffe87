# Benchmarks live in bench/, a module of their own, so that the library's
# go.mod gains no dependencies. See docs/benchmarks.md.
.PHONY: bench bench-quick faults model

# The full run: a few minutes; writes bench/results.json.
bench:
	cd bench && go run . -out results.json

# A short run to try things out: under 2 minutes; writes bench/quick.json.
bench-quick:
	cd bench && go run . -quick -out quick.json

# The fault-injection run: a minute per fault (about 8 minutes); prints the
# table that the README's GUARANTEES quotes. CI runs it for 2s per fault.
faults:
	DLOCK_FAULT_PHASE=60s go test -run '^TestFaults$$' -v -count=1 -timeout 30m .

# The protocol models (model/, docs/model.md): spin must hold each one and
# reject each broken variant; about seven minutes.
model:
	go test -count=1 -v ./model
