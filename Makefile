# gpu-fleet: the two commands a fresh machine needs are `make setup` and `make test`.
# Stack commands: make preview|up|destroy|refresh STACK=<lab|canary|full> [ARGS="..."]
# A host gone for good: make forget STACK=<stack> NODE=<host> [ARGS=--yes]
# A state from before bundles (issue 16): make migrate STACK=<stack> [ARGS=--dry-run]
STACK ?= lab
PULUMI := bin/pulumi
# before every up: a lock a dead run left is reported (never cleared), a killed run's pending
# creates cleared (components/runlock.py)
RUNLOCK := bash -c '. scripts/env.sh && exec python -m components.runlock "$$0"'
# pulumi <op> with nodes the stack marks unreachable left as recorded (--exclude of their
# resources, with a warning naming them; components/pending_hosts.py)
OP := bash -c '. scripts/env.sh && exec python -m components.pending_hosts "$$@"' op
# What a run prints: auto (a line per resource up to 64 nodes, above that a summary per layer with
# the CLI's own output in .state/runs/; components/run_summary.py), summary, or full.
VIEW ?= auto
# Every preview and up runs the policy pack (with the stack's written relaxations, if any), so a
# violation stops `up` before any host is touched. POLICY= (empty) runs without it.
# The engine's resource operations at once: the provider process serves 32 (components/provider_host.py),
# one host's connection 8 (transport/ssh.py MAX_SESSIONS); the CLI's default is 8 for all hosts together.
PARALLEL ?= --parallel 32
POLICY ?= --policy-pack policies $(if $(wildcard policies/stacks/$(STACK).json),--policy-pack-config policies/stacks/$(STACK).json)

.PHONY: setup test preview up destroy refresh stack policy lab lab-down forget migrate

# Set-up; as root it also brings the lab up and deploys the lab stack (GPU_FLEET_SETUP_LAB=0 skips).
setup:
	scripts/setup.sh
	@if [ "$$(id -u)" = 0 ] && [ "$${GPU_FLEET_SETUP_LAB:-1}" != 0 ]; then $(MAKE) --no-print-directory lab; fi

test:
	scripts/test.sh

# Select the stack, creating it (passphrase secrets provider) on first use, and
# generate its missing secrets (MUNGE key) once.
stack:
	@$(PULUMI) stack select --create --secrets-provider passphrase $(STACK)
	@.venv/bin/python -m components.stack_secrets ensure $(STACK) --pulumi bin/pulumi

# A preview writes no state, yet the CLI re-serializes the whole snapshot after every step
# unless told not to: 140 nodes 118 s -> ~17 s (bench/README.md, scale.py)
preview: stack
	@PULUMI_SKIP_CHECKPOINTS=true $(OP) preview $(STACK) --view $(VIEW) -- $(POLICY) $(ARGS)

up: stack
	@$(RUNLOCK) $(STACK)
	@$(OP) up $(STACK) --view $(VIEW) -- $(PARALLEL) $(POLICY) $(ARGS)

# A host gone for good: forget its resources from the stack's state, touching no host
# (components/forget.py; refused while the stack still declares it). ARGS=--yes skips the question.
forget:
	@test -n "$(NODE)" || { echo "usage: make forget STACK=<stack> NODE=<host> [ARGS=--yes]" >&2; exit 2; }
	@bash -c '. scripts/env.sh && exec python -m components.forget "$$@"' forget $(STACK) $(NODE) $(ARGS)

# A state written before bundles (a host's accounts, a node's Slurm files as one resource each):
# fold its per-object resources into them, touching no host (components/migrate.py). Until it
# ran, preview and up refuse, naming this command.
migrate:
	@bash -c '. scripts/env.sh && exec python -m components.migrate --stack "$$@"' migrate $(STACK) $(ARGS)

refresh: stack
	@$(OP) refresh $(STACK) --view $(VIEW) -- $(PARALLEL) $(ARGS)

destroy: stack
	@$(OP) destroy $(STACK) --view $(VIEW) -- $(PARALLEL) $(ARGS)

# Preview under the policy pack, as in CI (the same as `make preview`).
policy: stack
	PULUMI_SKIP_CHECKPOINTS=true $(PULUMI) preview --stack $(STACK) $(POLICY) $(ARGS)

# The lab: local hosts (python -m lab up) and the lab stack deployed on them. --refresh
# reconciles state recorded for hosts a previous `lab down` wiped.
lab:
	.venv/bin/python -m lab up
	@$(MAKE) --no-print-directory stack STACK=lab
	@$(RUNLOCK) lab
	@$(OP) up lab -- --yes --refresh --skip-preview $(PARALLEL) $(POLICY) $(ARGS)

lab-down:
	.venv/bin/python -m lab down
