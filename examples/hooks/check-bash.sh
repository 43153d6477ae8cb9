#!/bin/sh
# PreToolUse hook for the review example: reads the tool call on stdin and
# refuses commands that touch the network. Exit 2 blocks the call.
input=$(cat)
case "$input" in
  *curl*|*wget*) echo "network tools are not allowed in review" >&2; exit 2 ;;
esac
exit 0
