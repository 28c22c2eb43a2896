"""The console side of the SDK contract (docs/spec.md, section 8, "SDK and console"):
POST /api/v1/sdk/jobs/<job_id>/{messages,retryable-errors,config,progress,c4d}/.

- auth: who may call (the job's own token), and how often (per job, per process);
- serializers: what each body may hold; every refusal names its field;
- views: what each call does to the job;
- urls: the routes, included by console.urls.
"""
