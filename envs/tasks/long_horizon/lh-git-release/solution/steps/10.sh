git -C repo branch hotfix/1.1.1 v1.1.0
