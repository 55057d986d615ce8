{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The processing elements of a dense layer: @p@ dot products computed in
parallel against one ROM word (contract steps 1 to 3).

Everything here is exact. Products keep all their bits, the bias is aligned to
the products' fraction bits, and the sum is taken on raw 'Signed' values
(plain wrapping adders, no saturation logic) in an accumulator that the types
guarantee is wide enough never to wrap.
-}
module K2C.Filter
  ( ExactAccumulator
  , neuron
  , filterBank
  ) where

import Clash.Prelude

import K2C.Memory (Neuron)

-- | Sizes under which an accumulator @SFixed ci cf@ holds the dot product of
-- @n@ inputs @SFixed ai af@ with weights @SFixed wi wf@ plus a bias exactly:
-- no fraction bit is lost (@cf = af + wf@) and there are enough integer bits
-- for the sum of @n + 1@ full-size products (@ceil(log2(n+1))@ growth bits).
-- The contract adds one more integer bit for the rounding offset of
-- requantization; that is allowed here (@<=@) but not required.
type ExactAccumulator n ai af wi wf ci cf =
  ( KnownNat ai, KnownNat af, KnownNat wi, KnownNat wf, KnownNat ci, KnownNat cf
  , cf ~ (af + wf)
  , (ai + wi + CLog 2 (n + 1)) <= ci
  )

-- | One neuron: @sum_j x_j * w_j + b@, exact.
neuron
  :: forall n ai af wi wf ci cf
   . ExactAccumulator n ai af wi wf ci cf
  => Vec n (SFixed ai af)
  -> Neuron n (SFixed wi wf)
  -> SFixed ci cf
neuron xs (ws, bias) = sf (SNat @cf) (fold (+) (raw bias :> zipWith term xs ws))
  where
    -- The product has exactly @af + wf = cf@ fraction bits, so widening it is
    -- a sign extension.
    term x w = raw (mul x w)
    -- 'resizeF' only ever widens here (both integer and fraction bits grow or
    -- stay), which is exact; then the raw bits are sign-extended.
    raw :: forall i f . (KnownNat i, KnownNat f, i <= ci, f <= cf)
        => SFixed i f -> Signed (ci + cf)
    raw x = unSF (resizeF x :: SFixed ci cf)

-- | The @p@ processing elements: every neuron of a ROM word against the same
-- input vector.
filterBank
  :: forall p n ai af wi wf ci cf
   . ExactAccumulator n ai af wi wf ci cf
  => Vec n (SFixed ai af)
  -> Vec p (Neuron n (SFixed wi wf))
  -> Vec p (SFixed ci cf)
filterBank xs = map (neuron xs)
