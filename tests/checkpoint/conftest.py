from tests.checkpoint.s3_fixtures import s3_server  # noqa: F401  (fixture)
