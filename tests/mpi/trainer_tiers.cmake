# Run with cmake -P by the test mlp_trainer_mpi_tiers: the example binary with multi-level
# checkpoints (--local-dir, 2 simulated nodes of 2 ranks, every second saved step drained to
# --ckpt-dir), trained on 4 ranks to step 75 (steps 25, 50, 75 saved; only 50 drained), then node 0
# lost (its local folder removed): the resume must come from node 1's partner copy of step 75,
# say so, and end with the parameters of an uninterrupted run, byte for byte. Then both nodes
# lost: the resume comes from the shared folder's step 100.
# With the ckpt tool (TOOL, when built): verify of each node folder, and of the run with
# --local-dir, before and after the loss.
# Inputs: MPIEXEC, TRAINER, TOOL (optional), WORK (a scratch folder, emptied first).
include("${CMAKE_CURRENT_LIST_DIR}/trainer_common.cmake")

set(tiers --local-dir "${WORK}/local" --ranks-per-node 2 --drain-every 2 --ckpt-dir "${WORK}/shared")
train(--steps 150 --ckpt-dir "${WORK}/straight" --params-out "${WORK}/straight.safetensors")
train(--steps 75 ${tiers})
# Step 75 was not drained: the end line says where it is (before, the local root alone).
expect("last checkpoint: step 75 in the node-local tiers under [^\n]*/local \\(not drained to [^\n]*/shared\\)\n"
       "the end line does not name the undrained step 75 and its tiers")
# The run's node-local folders are under its id: <local>/run-<id>/node-<k>.
file(STRINGS "${WORK}/shared/.ckpt-run-id" id)
# The tool on the tiers (when built): verify of a node's folder checks the part of each step it
# holds (data parallel: rank 0 writes the one shard, so node 0 holds it and node 1 its partner
# copy); verify of the run with --local-dir says which tiers can restore each step (75 was not
# drained, 50 was). Exit 0 on intact tiers.
verify_says("${WORK}/local/run-${id}/node-0" "node-0/step-0*75: ok, holds shard 1 of 1, digest verified\n")
verify_says("${WORK}/local/run-${id}/node-1"
            "node-1/partner/step-0*75: ok, holds the partner copies of shard 1 of 1, digest verified\n")
verify_says("${WORK}/shared" --local-dir "${WORK}/local"
            "\nstep 50: restorable from the node-local tier, the shared tier\nstep 75: restorable from the node-local tier\n$")
file(REMOVE_RECURSE "${WORK}/local/run-${id}/node-0")
# Node 0 lost: node 1's partner copy stands in for its shard.
verify_says("${WORK}/shared" --local-dir "${WORK}/local" "\nstep 75: restorable from the node-local tier with its partner copies\n$")
train(--steps 150 ${tiers} --resume --params-out "${WORK}/resumed.safetensors")
expect("last checkpoint: [^\n]*/shared/step-0000000150\n" "the end line does not name the drained step 150 in the shared folder")
# Data parallel: rank 0 writes the one shard; node 1 keeps its partner copy and sends it to node 0.
expect("restored step 75: model-00001-of-00001.safetensors from the partner tier of node 1\n"
       "the resume after node 0's loss did not come from node 1's partner copy")
same_params("${WORK}/straight.safetensors" "${WORK}/resumed.safetensors"
            "the run resumed from the partner copy differs from the uninterrupted run")
# Steps 100 and 150 were drained (multiples of 2 x 25); with both nodes' folders gone, the newest
# step in the shared folder serves.
file(REMOVE_RECURSE "${WORK}/local")
train(--steps 150 ${tiers} --resume)
expect("restored step 150: model-00001-of-00001.safetensors from the folder tier\n"
       "the resume with both nodes lost did not come from the shared folder")
file(REMOVE_RECURSE "${WORK}")
