mkdir -p home/deploy/.ssh
cp keys/deploy.pub home/deploy/.ssh/authorized_keys
chmod 750 home/deploy
chmod 700 home/deploy/.ssh
chmod 600 home/deploy/.ssh/authorized_keys
