"""rltap.protocols"""
