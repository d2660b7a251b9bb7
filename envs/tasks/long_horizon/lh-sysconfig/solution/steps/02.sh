echo 'deploy:x:1050:' >> etc/group
sed -i -E '/^docker:/ s/^(docker:x:999:)(.+)$/\1\2,deploy/; /^docker:x:999:$/ s/$/deploy/' etc/group
