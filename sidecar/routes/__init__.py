"""Which route a request takes, as the model server will route it, and what that means
for admission: how its body is read, how it is charged, which shape its answers take."""
