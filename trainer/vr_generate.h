/* vr_generate.h: `verl-trainer generate` (the rollout engine as a command; docs/operations.md,
 * "Rollout / generate").
 *
 *   verl-trainer generate --model DIR [--device cpu|cuda] [--max-new-tokens N] [--temperature T]
 *       [--top-p P] [--top-k K] [--n N] [--seed S] [--stop-token-ids A,B,..] [--ignore-eos]
 *       [--kv-cache-bytes B] [--block-size N] [--max-seqs N] [--max-batch-tokens N]
 *       [--max-model-len N] [--threads N] [--input FILE] [--output FILE] [--stats]
 *
 * Reads one JSON object per line, {"input_ids": [int, ...]} (other keys ignored, blank lines
 * skipped), from --input (default stdin); writes, for every prompt in order, n lines
 * {"output_ids": [...], "logprobs": [...], "finish_reason": "stop"|"length"} to --output (default
 * stdout). Every input line is checked before anything is generated: a bad one is reported as
 * "verl-trainer generate: FILE:LINE: <problem>" and the command exits 1 with no output. Stop ids:
 * generation_config.json's eos_token_id (or config.json's) unless --ignore-eos, plus
 * --stop-token-ids. Exit: 0, 1 (the model does not load, bad input, generation failed), 2 (command
 * line). */
#ifndef VR_GENERATE_H
#define VR_GENERATE_H

#ifdef __cplusplus
extern "C" {
#endif

/* argv[0] is "generate". */
int vr_generate_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* VR_GENERATE_H */
