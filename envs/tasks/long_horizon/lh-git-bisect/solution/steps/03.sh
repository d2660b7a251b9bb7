cd repo && git bisect start main v1.0 >/dev/null && git bisect run ./check.sh > /tmp/bisect.out 2>&1
