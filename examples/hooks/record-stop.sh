#!/bin/sh
# Stop hook for the review example: records that the session ended.
mkdir -p /run/hookbox/out
cat > /run/hookbox/out/stop-event.json
