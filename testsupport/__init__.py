"""What the tests and benchmarks share, kept out of the shipped apps (issue 18).

- `testsupport.factory`: the one job factory (a CreateJob body, and a job submitted
  through the API or the domain's action).
- `testsupport.jobs`: letting real jobs (run as `nobody` under root) reach the test's files.
- `testsupport.monitor`: ticking the monitor until a job gets somewhere, the test
  database's URL for processes a test starts, and a job that fails once.
- `testsupport.waiting`: `wait_until`, asking again until a real process got there.
"""
