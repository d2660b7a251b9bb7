echo 'deploy:x:1050:1050:Deploy:/home/deploy:/bin/bash' >> etc/passwd
