"""Credentials a call carries, as pure functions over plain data.

`spec.credentials` (`model.credentials`) declares each one; the flow brokers the values
(`flow.brokering`); these modules say which request carries which value (`requests`) and
how its header reads (`carried`); what is wrong with a declaration is
`pipeline.validation.credentials`. The http executor and the egress proxy both judge
requests here, so they cannot disagree.
"""
