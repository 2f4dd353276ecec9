/* vr_tcmd.h: verl-trainer's training-engine subcommands (vr_tcmd.c has the usage text):
 * `verl-trainer logprobs ...` and `verl-trainer sft ...`. Each takes argv with the subcommand
 * name as argv[0] and returns the process exit status (0 ok, 1 run-time failure, 2 bad command
 * line, model or input). Not thread-safe (getopt). */
#ifndef VR_TCMD_H
#define VR_TCMD_H

int vr_tcmd_logprobs(int argc, char **argv);
int vr_tcmd_sft(int argc, char **argv);

#endif
