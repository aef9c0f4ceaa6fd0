"""A QOS, an account and a user association in the lab's slurmdbd, through the controller.

Driven by tests/lab/test_accounting.py (test_sacct_objects_drift_is_seen_and_set_back), on the
accounting stack's running slurmdbd.
"""

import json

import pulumi

from components.providers.sacct import SlurmAccount, SlurmQos, SlurmUser

cfg = pulumi.Config()
conn = json.loads(cfg.require("conn"))
cluster = cfg.require("cluster")

qos = SlurmQos("gf-test-qos", conn=conn, qos="gf-test", fields={
    "GrpTRES": "gres/gpu=8", "MaxTRESPerAccount": "gres/gpu=4", "Priority": "10", "Preempt": "normal",
    "PreemptMode": "cluster", "GraceTime": "00:05:00"})
account = SlurmAccount("gf-test-account", conn=conn, account="gf-test", cluster=cluster,
                       fields={"MaxJobs": "10"}, opts=pulumi.ResourceOptions(depends_on=[qos]))
SlurmUser("gf-test-user", conn=conn, user="gftest", account="gf-test", cluster=cluster,
          fields={"MaxJobs": "4"}, opts=pulumi.ResourceOptions(depends_on=[account]))
